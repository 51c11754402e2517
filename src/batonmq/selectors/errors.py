"""The one exception a selector raises: a syntax error that names where in the text it is.

JMS 1.1 (javax.jms.Session.createConsumer) throws InvalidSelectorException "if the message
selector is invalid"; BatonMQ answers such a selector with 406 PRECONDITION_FAILED, whose reply
text is `str()` of this error.
"""

from __future__ import annotations

from typing import Final

#: Longest selector accepted, in characters: a bound on parse and evaluation work per message.
MAX_SELECTOR_LENGTH: Final = 4096
#: Deepest nesting accepted (parentheses, NOT, unary signs): keeps parsing (twelve frames a level)
#: and evaluation (two) far below Python's recursion limit, so a hostile selector is a syntax
#: error, not a RecursionError.
MAX_NESTING_DEPTH: Final = 32


#: Longest piece of selector text quoted in an error message (AMQP reply text is a short string).
MAX_EXCERPT: Final = 40


def excerpt(text: str) -> str:
    """`text` quoted for an error message, cut short if long."""
    if len(text) > MAX_EXCERPT:
        return repr(text[: MAX_EXCERPT - 3] + "...")
    return repr(text)


class SelectorSyntaxError(ValueError):
    """A selector that does not parse, or does not type-check where the types are known.

    `position` is the 0-based character offset of the offending token (the text's length for an
    unexpected end); `message` says what was wrong there.
    """

    position: int
    message: str

    def __init__(self, position: int, message: str) -> None:
        super().__init__(f"selector syntax error at position {position}: {message}")
        self.position = position
        self.message = message

    def __reduce__(self) -> tuple[type[SelectorSyntaxError], tuple[int, str]]:
        return (type(self), (self.position, self.message))
