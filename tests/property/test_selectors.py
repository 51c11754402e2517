"""JMS selectors against a reference evaluator, and the parser against arbitrary text.

Expressions are generated as trees (plain tuples, typed as the JMS grammar requires: numbers
where arithmetic and ordering need them, strings for IN and LIKE, truth values for AND, OR and
NOT), rendered to text with the fewest parentheses the precedence needs (plus random extra ones,
random keyword case and random Java whitespace), parsed, and evaluated on random values. The
reference evaluator below is the JMS 1.1 rules written as directly as possible over the
generated tree: binary AND and OR, a backtracking LIKE matcher, no compilation.
"""

from __future__ import annotations

import math
import operator
from functools import cache

from hypothesis import assume, given, settings
from hypothesis import strategies as st

from batonmq.selectors import SelectorSyntaxError, parse_selector
from batonmq.selectors.evaluate import compile_expression
from batonmq.selectors.like import compile_like
from batonmq.selectors.nodes import IsNull

NAMES = ["a", "b", "c", "s", "t", "flag"]
#: Few characters, so that generated strings, IN lists and LIKE patterns often meet.
ALPHABET = "ab%_!'"

# Reference semantics -----------------------------------------------------------------------------

ANY, ONE = ("any",), ("one",)


def is_number(value):
    return type(value) in (int, float)


def to_double(value):
    """Java's numeric promotion to double (a BigInteger beyond double's range is infinite)."""
    try:
        return float(value)
    except OverflowError:
        return math.inf if value > 0 else -math.inf


def truth(value):
    return value if value is True or value is False else None


def and3(first, second):
    """JMS's AND table: FALSE if either is FALSE, TRUE if both are TRUE, else UNKNOWN."""
    if first is False or second is False:
        return False
    return True if first is True and second is True else None


def or3(first, second):
    if first is True or second is True:
        return True
    return False if first is False and second is False else None


def not3(value):
    return None if value is None else not value


COMPARE = {
    "=": operator.eq,
    "<>": operator.ne,
    "<": operator.lt,
    "<=": operator.le,
    ">": operator.gt,
    ">=": operator.ge,
}


def compare(symbol, left, right):
    """JMS: NULL makes a comparison unknown; "If the comparison of non-like type values is
    attempted, the value of the operation is false"; exact and approximate numbers compare after
    promotion; "String and boolean comparison is restricted to = and <>"."""
    if left is None or right is None:
        return None
    if is_number(left) and is_number(right):
        if type(left) is not type(right):
            left, right = to_double(left), to_double(right)
        return COMPARE[symbol](left, right)
    if type(left) is not type(right) or symbol not in ("=", "<>"):
        return False
    return COMPARE[symbol](left, right)


def arithmetic(symbol, left, right):
    if not (is_number(left) and is_number(right)):
        return None
    if type(left) is not type(right):
        left, right = to_double(left), to_double(right)
    if symbol == "+":
        return left + right
    if symbol == "-":
        return left - right
    if symbol == "*":
        return left * right
    if right == 0:
        return None
    if type(left) is int:
        quotient = abs(left) // abs(right)
        return quotient if (left < 0) == (right < 0) else -quotient
    return left / right


def like_reference(elements, text):
    @cache
    def match(i, j):
        if i == len(elements):
            return j == len(text)
        element = elements[i]
        if element == ANY:
            return any(match(i + 1, k) for k in range(j, len(text) + 1))
        if j == len(text):
            return False
        return (element == ONE or element[1] == text[j]) and match(i + 1, j + 1)

    return match(0, 0)


def reference(node, values):
    kind = node[0]
    if kind in ("int", "float", "str", "bool"):
        return node[1]
    if kind == "id":
        value = values.get(node[1])
        return value if type(value) in (str, int, float, bool) else None
    if kind == "paren":
        return reference(node[1], values)
    if kind == "unary":
        value = reference(node[2], values)
        if not is_number(value):
            return None
        return -value if node[1] == "-" else value
    if kind == "arith":
        return arithmetic(node[1], reference(node[2], values), reference(node[3], values))
    if kind == "cmp":
        return compare(node[1], reference(node[2], values), reference(node[3], values))
    if kind == "between":
        _, negated, operand, low, high = node
        value, low, high = (reference(each, values) for each in (operand, low, high))
        if negated:  # "age < 15 OR age > 19"
            return or3(compare("<", value, low), compare(">", value, high))
        return and3(compare(">=", value, low), compare("<=", value, high))
    if kind == "in":
        _, negated, operand, strings = node
        value = reference(operand, values)
        if value is None:
            return None
        if type(value) is not str:
            return False
        return (value in strings) != negated
    if kind == "like":
        _, negated, operand, elements, _escape = node
        value = reference(operand, values)
        if value is None:
            return None
        if type(value) is not str:
            return False
        return like_reference(elements, value) != negated
    if kind == "isnull":
        return (reference(node[2], values) is None) != node[1]
    if kind == "not":
        return not3(truth(reference(node[1], values)))
    if kind == "and":
        return and3(truth(reference(node[1], values)), truth(reference(node[2], values)))
    if kind == "or":
        return or3(truth(reference(node[1], values)), truth(reference(node[2], values)))
    raise AssertionError(node)


# Generated expressions ---------------------------------------------------------------------------

small_text = st.text(ALPHABET, max_size=4)
identifiers = st.sampled_from(NAMES).map(lambda name: ("id", name))
#: Mostly small, so that comparisons and int / int division decide results; some at the edges
#: of long and of double's exact integers, where numeric promotion shows.
EDGE_INTEGERS = [2**53, 2**53 + 1, 2**63 - 1, -(2**63)]
integers = st.one_of(
    st.integers(-4, 4), st.sampled_from(EDGE_INTEGERS), st.integers(-(2**63), 2**63 - 1)
).map(lambda value: ("int", value))
floats = st.one_of(
    st.sampled_from([0.0, -0.0, 0.5, -2.5, 1.0, 9007199254740992.0]),
    st.floats(allow_nan=False, allow_infinity=False),
).map(lambda value: ("float", value))
strings = small_text.map(lambda value: ("str", value))
booleans = st.booleans().map(lambda value: ("bool", value))

numeric = st.recursive(
    st.one_of(integers, identifiers, floats),
    lambda inner: st.one_of(
        st.tuples(st.just("unary"), st.sampled_from("+-"), inner),
        st.tuples(st.just("arith"), st.sampled_from("+-*/"), inner, inner),
        st.tuples(st.just("paren"), inner),
    ),
    max_leaves=4,
)
textual = st.one_of(strings, identifiers)
non_numeric = st.sampled_from(["s", "t", "flag"]).map(lambda name: ("id", name))


@st.composite
def like_patterns(draw):
    escape = draw(st.sampled_from([None, "!", "a", "'", "\\"]))
    literals = "ab!'" if escape is None else ALPHABET + "\\"
    elements = draw(
        st.lists(
            st.one_of(
                st.just(ANY), st.just(ONE), st.sampled_from(literals).map(lambda c: ("lit", c))
            ),
            max_size=5,
        )
    )
    return tuple(elements), escape


def predicates(values):
    """Comparisons and the other predicates, over `values` for = and <>."""
    return st.one_of(
        st.tuples(st.just("cmp"), st.sampled_from(["=", "<>"]), values, values),
        st.tuples(st.just("cmp"), st.sampled_from(["<", "<=", ">", ">="]), numeric, numeric),
        # Any operator between properties of any type (s and t are mostly strings, flag boolean).
        st.tuples(st.just("cmp"), st.sampled_from(list(COMPARE)), non_numeric, non_numeric),
        st.tuples(st.just("between"), st.booleans(), numeric, numeric, numeric),
        st.tuples(
            st.just("in"),
            st.booleans(),
            textual,
            st.lists(small_text, min_size=1, max_size=3).map(tuple),
        ),
        like_patterns().flatmap(
            lambda pattern: st.tuples(
                st.just("like"), st.booleans(), textual, st.just(pattern[0]), st.just(pattern[1])
            )
        ),
        st.tuples(st.just("isnull"), st.booleans(), values),
    )


def extend_conditions(inner):
    comparable = st.one_of(numeric, strings, booleans, identifiers, inner)
    return st.one_of(
        st.tuples(st.just("not"), inner),
        st.tuples(st.just("and"), inner, inner),
        st.tuples(st.just("or"), inner, inner),
        st.tuples(st.just("paren"), inner),
        predicates(comparable),
    )


conditions = st.recursive(
    st.one_of(
        predicates(st.one_of(numeric, strings, booleans, identifiers)), identifiers, booleans
    ),
    extend_conditions,
    max_leaves=6,
)

scalar_values = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-4, 4),
    st.sampled_from(EDGE_INTEGERS),
    st.integers(-(2**63), 2**63 - 1),
    st.sampled_from([0.0, 0.5, -2.5, 1.0, 9007199254740992.0, math.nan, math.inf]),
    st.floats(),
    small_text,
    st.binary(max_size=2),
)


def mostly(strategy):
    return st.one_of(strategy, strategy, strategy, scalar_values)


#: Every name present (None is NULL), each mostly of the type its name suggests; or some names,
#: of any type.
value_maps = st.one_of(
    st.fixed_dictionaries(
        {
            "a": mostly(st.integers(-4, 4)),
            "b": mostly(st.integers(-4, 4) | st.sampled_from([0.5, -2.5])),
            "c": scalar_values,
            "s": mostly(small_text),
            "t": mostly(small_text),
            "flag": mostly(st.booleans()),
        }
    ),
    st.dictionaries(st.sampled_from(NAMES), scalar_values),
)


# Rendering ---------------------------------------------------------------------------------------

#: Binding strength, loosest first; a child weaker than its place needs parentheses.
OR, AND, NOT, PREDICATE, SUM, PRODUCT, UNARY, PRIMARY = range(1, 9)
LEVELS = {
    "or": OR,
    "and": AND,
    "not": NOT,
    "cmp": PREDICATE,
    "between": PREDICATE,
    "in": PREDICATE,
    "like": PREDICATE,
    "isnull": PREDICATE,
    "unary": UNARY,
}


def level(node):
    if node[0] == "arith":
        return SUM if node[1] in "+-" else PRODUCT
    if node[0] in ("int", "float") and (node[1] < 0 or math.copysign(1, node[1]) < 0):
        return UNARY  # "-5" is a sign and a literal
    return LEVELS.get(node[0], PRIMARY)


def quoted(text):
    return "'" + text.replace("'", "''") + "'"


def render_int(value, style):
    if value < 0 or style == "decimal":
        return str(value)
    if style == "hex":
        return hex(value)
    if style == "octal":
        return "0" + format(value, "o") if value else "0"
    return f"{value}L"


class Renderer:
    def __init__(self, keyword_case, space, int_style):
        self.keyword_case = keyword_case
        self.space = space
        self.int_style = int_style

    def kw(self, word):
        return self.keyword_case(word)

    def join(self, *parts):
        return self.space.join(parts)

    def child(self, node, minimum):
        text = self.render(node)
        return f"({text})" if level(node) < minimum else text

    def render(self, node):
        kind = node[0]
        if kind == "int":
            return render_int(node[1], self.int_style)
        if kind == "float":
            return repr(node[1])
        if kind == "str":
            return quoted(node[1])
        if kind == "bool":
            return self.kw("TRUE" if node[1] else "FALSE")
        if kind == "id":
            return node[1]
        if kind == "paren":
            return "(" + self.render(node[1]) + ")"
        if kind == "unary":
            return self.join(node[1], self.child(node[2], UNARY))
        if kind == "arith":
            own = level(node)
            return self.join(self.child(node[2], own), node[1], self.child(node[3], own + 1))
        if kind == "cmp":
            return self.join(self.child(node[2], SUM), node[1], self.child(node[3], SUM))
        if kind == "between":
            _, negated, operand, low, high = node
            return self.join(
                self.child(operand, SUM),
                *([self.kw("NOT")] if negated else []),
                self.kw("BETWEEN"),
                self.child(low, SUM),
                self.kw("AND"),
                self.child(high, SUM),
            )
        if kind == "in":
            _, negated, operand, values = node
            listed = "(" + ", ".join(quoted(value) for value in values) + ")"
            return self.join(
                self.child(operand, SUM),
                *([self.kw("NOT")] if negated else []),
                self.kw("IN"),
                listed,
            )
        if kind == "like":
            _, negated, operand, elements, escape = node
            pattern = "".join(self.pattern_element(element, escape) for element in elements)
            parts = [self.child(operand, SUM), *([self.kw("NOT")] if negated else [])]
            parts += [self.kw("LIKE"), quoted(pattern)]
            if escape is not None:
                parts += [self.kw("ESCAPE"), quoted(escape)]
            return self.join(*parts)
        if kind == "isnull":
            words = ["IS", "NOT", "NULL"] if node[1] else ["IS", "NULL"]
            return self.join(self.child(node[2], SUM), *map(self.kw, words))
        if kind == "not":
            return self.join(self.kw("NOT"), self.child(node[1], NOT))
        if kind in ("and", "or"):
            own = level(node)
            return self.join(
                self.child(node[1], own), self.kw(kind.upper()), self.child(node[2], own + 1)
            )
        raise AssertionError(node)

    @staticmethod
    def pattern_element(element, escape):
        if element == ANY:
            return "%"
        if element == ONE:
            return "_"
        char = element[1]
        return escape + char if char in "%_" or char == escape else char


renderers = st.builds(
    Renderer,
    st.sampled_from([str.upper, str.lower, str.title]),
    st.sampled_from([" ", "  ", "\t", "\n", "\r\n", " \f "]),
    st.sampled_from(["decimal", "hex", "octal", "long"]),
)


# Properties ---------------------------------------------------------------------------------------


def parse_or_error(text):
    try:
        return parse_selector(text), None
    except SelectorSyntaxError as error:
        return None, error


@settings(max_examples=1500)
@given(
    expression=conditions,
    renderer=renderers,
    environments=st.lists(value_maps, min_size=1, max_size=4),
)
def test_selectors_evaluate_as_the_reference(expression, renderer, environments):
    """A well-formed expression parses, and selects exactly when JMS's rules make it TRUE:
    "A message selector matches a message if the selector evaluates to true"."""
    text = renderer.render(expression)
    selector, error = parse_or_error(text)
    # Generated trees are rarely deeper than MAX_NESTING_DEPTH; those are not the question.
    assume(error is None or not error.message.startswith("nested more than"))
    assert error is None, (text, error)
    for values in environments:
        expected = truth(reference(expression, values))
        assert selector.evaluate(values) is expected, (text, values)
        assert selector.matches(values) is (expected is True)


@settings(max_examples=1000)
@given(
    expression=numeric,
    renderer=renderers,
    environments=st.lists(value_maps, min_size=1, max_size=4),
)
def test_arithmetic_evaluates_as_the_reference(expression, renderer, environments):
    """Arithmetic values, compared exactly (type, sign of zero, NaN): JMS: "Arithmetic
    operations must use numeric promotion in the Java programming language"; int / int
    truncates toward zero; NULL, a non-number or a division by zero is NULL."""
    text = renderer.render(expression)
    selector, error = parse_or_error(f"({text}) IS NULL")
    assume(error is None or not error.message.startswith("nested more than"))
    assert error is None, (text, error)
    assert isinstance(selector.expression, IsNull)
    value_of = compile_expression(selector.expression.operand)
    for values in environments:
        assert repr(value_of(values)) == repr(reference(expression, values)), (text, values)


@settings(max_examples=500)
@given(pattern=like_patterns(), text=small_text)
def test_like_matches_as_the_reference(pattern, text):
    elements, escape = pattern
    rendered = "".join(Renderer.pattern_element(element, escape) for element in elements)
    assert compile_like(rendered, escape)(text) is like_reference(elements, text)


TOKENS = [
    *["a", "b", "JMSPriority", "'x'", "'it''s'", "'", "1", "0x1F", "017", "2.5", "1e3", ".5"],
    *["7F", "9223372036854775808", "TRUE", "false", "NULL", "NOT", "AND", "OR", "BETWEEN"],
    *["IN", "LIKE", "ESCAPE", "IS", "=", "<>", "<", "<=", ">", ">=", "+", "-", "*", "/", "("],
    *[")", ",", "!=", "#", " "],
]
soups = st.lists(st.sampled_from(TOKENS), max_size=20).map(" ".join) | st.lists(
    st.sampled_from(TOKENS), max_size=20
).map("".join)


def check_parse(text, environments):
    selector, error = parse_or_error(text)
    if error is not None:
        assert 0 <= error.position <= len(text)
        assert str(error).startswith(f"selector syntax error at position {error.position}: ")
        assert len(str(error).encode()) <= 255  # fits an AMQP reply-text short string
        return
    for values in environments:
        assert selector.evaluate(values) in (True, False, None)


@settings(max_examples=1000)
@given(text=st.text() | soups, environments=st.lists(value_maps, max_size=3))
def test_any_text_parses_or_is_a_syntax_error(text, environments):
    """Nothing but SelectorSyntaxError comes out of the parser, with a position inside the text;
    whatever parses evaluates without raising."""
    check_parse(text, environments)


@settings(max_examples=500)
@given(
    expression=conditions,
    renderer=renderers,
    edits=st.lists(st.tuples(st.integers(0, 10**6), st.sampled_from([*TOKENS, ""])), max_size=3),
    environments=st.lists(value_maps, max_size=3),
)
def test_damaged_selectors_parse_or_are_syntax_errors(expression, renderer, edits, environments):
    """Well-formed selectors with characters replaced: the errors are near the valid ones."""
    text = renderer.render(expression)
    for offset, replacement in edits:
        at = offset % (len(text) + 1)
        text = text[:at] + replacement + text[at + 1 :]
    check_parse(text, environments)
