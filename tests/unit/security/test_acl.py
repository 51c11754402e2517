"""Qpid ACL files (Qpid manual §2.2): the grammar, its errors and their places, and the decisions.

The examples of §2.2 are copied from the seed. The seed is a PDF turned into text: in places it
runs a file's lines together on one line, and it cuts some long lines short at the page edge.
Where a test restores the line breaks, it checks that the restored text, with blanks squeezed,
is the seed's text word for word (`squeezed`); the one repair of a cut-short token is named
where it is made.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

import pytest

from batonmq.security.acl import (
    AclFileError,
    AclGroup,
    AclRule,
    AclRules,
    AclSyntaxError,
    Action,
    Decision,
    ObjectType,
    Permission,
    Property,
    wildcard_matches,
)
from batonmq.security.acl_parser import load_acl_file, parse_acl

NO_PROPERTIES: Mapping[Property, str] = {}


def squeezed(text: str) -> str:
    return " ".join(text.split())


def check(
    rules: AclRules,
    user: str,
    action: Action,
    object_type: ObjectType,
    **properties: str,
) -> Decision:
    """`rules.check` with properties given by their Table 2.5 names, in upper case."""
    return rules.check(
        user, action, object_type, {Property[name]: value for name, value in properties.items()}
    )


def parse_error(text: str) -> AclSyntaxError:
    with pytest.raises(AclSyntaxError) as raised:
        parse_acl(text, "acl/broker.acl")
    return raised.value


# --- the grammar ---------------------------------------------------------------------------------


def test_a_full_rule_parses_to_its_parts():
    rules = parse_acl('ACL ALLOW-LOG bob PUBLISH EXCHANGE name="amq.direct" routingkey=orders.*')
    assert rules.rules == (
        AclRule(
            permission=Permission.ALLOW_LOG,
            subject="bob",
            action=Action.PUBLISH,
            object_type=ObjectType.EXCHANGE,
            properties=((Property.NAME, "amq.direct"), (Property.ROUTING_KEY, "orders.*")),
            line=1,
        ),
    )
    assert rules.groups == ()


def test_all_and_an_absent_object_are_none():
    rules = parse_acl("ACL DENY ALL ALL\nACL ALLOW bob CREATE ALL\nACL ALLOW bob CREATE")
    assert [(rule.subject, rule.action, rule.object_type) for rule in rules.rules] == [
        (None, None, None),
        ("bob", Action.CREATE, None),
        ("bob", Action.CREATE, None),
    ]


def test_keywords_match_in_any_case_and_names_are_kept_as_written():
    """§2.2.4.3 writes `routingKey` for Table 2.5's `routingkey`; Qpid matches keywords in any
    case."""
    rules = parse_acl('acl Allow-Log Bob consume Queue routingKey="K" DURABLE=True\ngroup Ops Bob')
    assert rules.rules[0] == AclRule(
        permission=Permission.ALLOW_LOG,
        subject="Bob",
        action=Action.CONSUME,
        object_type=ObjectType.QUEUE,
        properties=((Property.ROUTING_KEY, "K"), (Property.DURABLE, "true")),
        line=1,
    )
    assert rules.groups == (AclGroup(name="Ops", members=("Bob",), line=2),)
    assert not check(rules, "bob", Action.CONSUME, ObjectType.QUEUE, ROUTING_KEY="K").allowed


def test_every_keyword_of_tables_2_2_to_2_5_parses():
    permissions = ["ALLOW", "ALLOW-LOG", "DENY", "DENY-LOG"]
    actions = ["CONSUME", "PUBLISH", "CREATE", "ACCESS", "BIND", "UNBIND", "DELETE", "PURGE"]
    actions.append("UPDATE")
    objects = ["QUEUE", "EXCHANGE", "VIRTUALHOST", "METHOD", "BROKER", "LINK"]
    properties = ["name", "routingkey", "type", "alternate", "queuename", "component"]
    properties += ["schemapackage", "schemaclass"]
    booleans = ["durable", "passive", "autodelete", "exclusive", "temporary"]
    text = "\n".join(
        [f"ACL {permission} u ALL" for permission in permissions]
        + [f"ACL ALLOW u {action}" for action in actions]
        + [f"ACL ALLOW u ALL {name}" for name in objects]
        + [f"ACL ALLOW u ALL ALL {name}=v" for name in properties]
        + [f"ACL ALLOW u ALL ALL {name}=false" for name in booleans]
    )
    rules = parse_acl(text).rules
    assert [rule.permission.value for rule in rules[:4]] == permissions
    assert [rule.action.value for rule in rules[4:13] if rule.action] == actions
    assert [rule.object_type.value for rule in rules[13:19] if rule.object_type] == objects
    assert [rule.properties[0][0].value for rule in rules[19:]] == properties + booleans


def test_quotes_hold_blanks_equals_and_hashes_and_either_quote_works():
    rules = parse_acl("""ACL ALLOW "x y" ALL QUEUE name='a=b # c' alternate="it's" """)
    assert rules.rules[0].subject == "x y"
    assert rules.rules[0].properties == ((Property.NAME, "a=b # c"), (Property.ALTERNATE, "it's"))


def test_blanks_may_surround_the_equals_sign():
    rules = parse_acl("ACL ALLOW bob ALL QUEUE name = q1 durable\t=\tfalse")
    assert rules.rules[0].properties == ((Property.NAME, "q1"), (Property.DURABLE, "false"))


def test_an_empty_file_and_blank_lines_have_no_rules():
    assert parse_acl("") == AclRules(rules=(), groups=(), users_by_group={})
    assert parse_acl("\n  \n\t\r\n").rules == ()


# --- comments ------------------------------------------------------------------------------------


def test_comments_fill_a_line_or_end_one_but_not_inside_quotes():
    rules = parse_acl(
        "# a comment\n"
        "   # an indented comment\n"
        "ACL ALLOW bob CREATE QUEUE # Grants bob permission to create\n"
        'ACL DENY bob CREATE QUEUE name="my#queue"# a comment right after the quote\n'
        "ACL DENY bob DELETE#a comment right after a word\n"
    )
    assert [(rule.action, rule.properties, rule.line) for rule in rules.rules] == [
        (Action.CREATE, (), 3),
        (Action.CREATE, ((Property.NAME, "my#queue"),), 4),
        (Action.DELETE, (), 5),
    ]


def test_the_syntax_example_of_2_2_3():
    """§2.2.3: "Comments may be introduced with the hash (#) character and are ignored. Long
    lines can be broken with the slash ( \\) character." """
    seed = (
        r"# A comment ACL ALLOW admin CREATE ALL # Also a comment ACL DENY guest \ ALL ALL # A "
        r"broken line GROUP securegroup bob \ alice # Another broker line"
    )
    text = (
        "# A comment\n"
        "ACL ALLOW admin CREATE ALL # Also a comment\n"
        "ACL DENY guest \\\n"
        "ALL ALL # A broken line\n"
        "GROUP securegroup bob \\\n"
        "alice # Another broker line\n"
    )
    assert squeezed(text) == seed
    rules = parse_acl(text)
    assert rules.rules == (
        AclRule(Permission.ALLOW, "admin", Action.CREATE, None, (), line=2),
        AclRule(Permission.DENY, "guest", None, None, (), line=3),
    )
    assert rules.groups == (AclGroup("securegroup", ("bob", "alice"), line=5),)
    assert rules.users_by_group == {"securegroup": frozenset({"bob", "alice"})}


# --- continuation lines --------------------------------------------------------------------------


def test_a_continued_rule_has_the_line_it_starts_on():
    rules = parse_acl(
        "\n"
        "ACL ALLOW \\\n"
        "  bob \\   # a comment may follow the slash\n"
        "  PUBLISH EXCHANGE \\\n"
        '  name="amq.direct"\n'
        "ACL DENY ALL ALL\n"
    )
    assert [(rule.subject, rule.properties, rule.line) for rule in rules.rules] == [
        ("bob", ((Property.NAME, "amq.direct"),), 2),
        (None, (), 6),
    ]


def test_a_slash_needs_no_blank_before_it_and_windows_line_ends_work():
    rules = parse_acl("ACL ALLOW bob\\\r\nCREATE QUEUE\r\nACL DENY ALL ALL\r\n")
    assert [(rule.subject, rule.action, rule.line) for rule in rules.rules] == [
        ("bob", Action.CREATE, 1),
        (None, None, 3),
    ]


def test_a_continuation_ends_at_a_blank_or_comment_line():
    error = parse_error("ACL ALLOW bob \\\n\nCREATE QUEUE")
    assert (error.line, error.column, error.message) == (1, 14, "expected an action, or ALL")
    error = parse_error("ACL ALLOW bob \\\n# comment\nCREATE QUEUE")
    assert (error.line, error.column) == (1, 14)


def test_a_continuation_on_the_last_line_ends_the_rule():
    assert parse_acl("ACL ALLOW bob CREATE \\").rules[0].action is Action.CREATE


def test_errors_in_continued_rules_point_at_the_physical_line():
    error = parse_error("ACL ALLOW \\\n  bob \\\n  PUBLSH EXCHANGE\n")
    assert (error.line, error.column, error.message) == (3, 3, "unknown action 'PUBLSH'")
    error = parse_error("GROUP g \\\n a \\\n b \\\n   all\n")
    assert (error.line, error.column) == (4, 4)
    error = parse_error('ACL ALLOW bob ALL QUEUE \\\n durable="maybe"')
    assert (error.line, error.column) == (2, 10)


# --- errors --------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "line", "column", "message"),
    [
        ("ACL ALLOW bob PUBLSH", 1, 15, "unknown action 'PUBLSH'"),
        ("\n\nACL PERMIT bob ALL", 3, 5, "unknown permission 'PERMIT'"),
        ("ACL ALLOW bob ALL TOPIC", 1, 19, "unknown object type 'TOPIC'"),
        ("ACL ALLOW bob ALL QUEUE colour=red", 1, 25, "unknown property 'colour'"),
        ("ACL ALLOW bob ALL name=q", 1, 19, "unknown object type 'name'"),
        ("ALLOW bob ALL", 1, 1, "unknown keyword 'ALLOW': a line starts with ACL or GROUP"),
        ("= x", 1, 1, "unknown keyword '=': a line starts with ACL or GROUP"),
        ("ACL", 1, 4, "expected a permission (ALLOW, ALLOW-LOG, DENY or DENY-LOG)"),
        ("ACL ALLOW", 1, 10, "expected a user or group name, or ALL"),
        ("ACL  ALLOW  bob  ", 1, 16, "expected an action, or ALL"),
        ("ACL ALLOW = ALL", 1, 11, "expected a user or group name, or ALL, found '='"),
        ('ACL ALLOW "" ALL', 1, 11, "expected a user or group name, or ALL, found empty quotes"),
        ("ACL ALLOW bob ALL = ALL", 1, 19, "expected an object type, or ALL, found '='"),
        ("ACL ALLOW bob ALL QUEUE name", 1, 29, "expected '=' after property 'name'"),
        ("ACL ALLOW bob ALL QUEUE name q", 1, 30, "expected '=' after property 'name'"),
        ("ACL ALLOW bob ALL QUEUE name=", 1, 30, "expected a value for property 'name'"),
        (
            "ACL ALLOW bob ALL QUEUE name==",
            1,
            30,
            "expected a value for property 'name', found '='",
        ),
        (
            "ACL ALLOW bob ALL QUEUE name=''",
            1,
            30,
            "expected a value for property 'name', found empty quotes",
        ),
        ("ACL ALLOW bob ALL QUEUE =x", 1, 25, "expected a property name, found '='"),
        ("ACL ALLOW bob ALL QUEUE name=a NAME=b", 1, 32, "property 'NAME' is given twice"),
        (
            "ACL ALLOW bob ALL QUEUE durable=yes",
            1,
            33,
            "property 'durable' is true or false, not 'yes'",
        ),
        (
            "ACL ALLOW bob ALL QUEUE temporary=*",
            1,
            35,
            "property 'temporary' is true or false, not '*'",
        ),
        ('ACL ALLOW bob ALL QUEUE name="q', 1, 30, 'quote " is not closed on its line'),
        ("ACL ALLOW 'bob\n' ALL", 1, 11, "quote ' is not closed on its line"),
        (
            "ACL ALLOW bob \\ ALL",
            1,
            15,
            "'\\' breaks a line only at its end (a comment may follow it)",
        ),
        ("ACL ALLOW bob\x00 ALL", 1, 14, "unexpected character U+0000"),
        ("\ufeffACL ALLOW bob ALL", 1, 1, "unexpected character U+FEFF"),
        ("GROUP", 1, 6, "expected a group name"),
        ("GROUP admins", 1, 13, "expected at least one member"),
        ("GROUP admins bob =", 1, 18, "expected a member, found '='"),
        ("GROUP all bob", 1, 7, "ALL means every user; it cannot name a group or a member"),
        ("GROUP admins bob All", 1, 18, "ALL means every user; it cannot name a group or a member"),
        ("GROUP a x\n\nGROUP a y", 3, 7, "group 'a' is already defined on line 1"),
    ],
)
def test_syntax_errors_say_what_and_where(text: str, line: int, column: int, message: str):
    error = parse_error(text)
    assert (error.line, error.column, error.message) == (line, column, message)
    assert error.path == "acl/broker.acl"


def test_keywords_are_compared_in_ascii_only():
    """U+017F, the long s, upper-cases to S; ACCE and two of them is not ACCESS."""
    error = parse_error("ACL ALLOW bob ACCE\u017f\u017f")
    assert error.message == "unknown action 'ACCE\u017f\u017f'"


def test_the_error_text_names_file_line_and_column():
    error = parse_error("ACL ALLOW bob ALL\n\n   ACL ALLOW bob PUBLSH")
    assert str(error) == "acl/broker.acl:3:18: unknown action 'PUBLSH'"
    assert isinstance(error, ValueError)
    with pytest.raises(AclSyntaxError) as raised:
        parse_acl("ACL ALLOW bob PUBLSH")
    assert str(raised.value) == "<acl>:1:15: unknown action 'PUBLSH'"


# --- groups --------------------------------------------------------------------------------------


def test_groups_nest_and_may_be_used_before_they_are_defined():
    rules = parse_acl(
        "GROUP everyone admins ops carol\n"
        "GROUP admins alice\n"
        "GROUP ops bob admins\n"
        "ACL ALLOW everyone ACCESS VIRTUALHOST\n"
        "ACL ALLOW ops ALL QUEUE\n"
    )
    assert rules.users_by_group == {
        "admins": frozenset({"alice"}),
        "ops": frozenset({"bob", "alice"}),
        "everyone": frozenset({"alice", "bob", "carol"}),
    }
    assert [group.members for group in rules.groups] == [
        ("admins", "ops", "carol"),
        ("alice",),
        ("bob", "admins"),
    ]
    for user in ("alice", "bob", "carol"):
        assert check(rules, user, Action.ACCESS, ObjectType.VIRTUALHOST).allowed
    assert check(rules, "alice", Action.DELETE, ObjectType.QUEUE).allowed
    assert not check(rules, "carol", Action.DELETE, ObjectType.QUEUE).allowed
    assert not check(rules, "dave", Action.ACCESS, ObjectType.VIRTUALHOST).allowed


def test_a_group_name_does_not_match_a_user_of_another_name():
    rules = parse_acl("GROUP admins alice\nACL ALLOW admins ALL")
    assert not check(rules, "bob", Action.CREATE, ObjectType.QUEUE).allowed
    # A user whose name is the group's still matches the rule by name.
    assert check(rules, "admins", Action.CREATE, ObjectType.QUEUE).allowed


@pytest.mark.parametrize(
    ("text", "line", "column", "message"),
    [
        ("GROUP a b a", 1, 11, "group 'a' contains itself: a -> a"),
        ("GROUP a b\nGROUP b c a", 2, 11, "group 'a' contains itself: a -> b -> a"),
        (
            "GROUP a x b\nGROUP b c\nGROUP c \\\n  y b",
            4,
            5,
            "group 'b' contains itself: b -> c -> b",
        ),
    ],
)
def test_a_group_that_contains_itself_is_an_error(text: str, line: int, column: int, message: str):
    error = parse_error(text)
    assert (error.line, error.column, error.message) == (line, column, message)


def test_a_long_chain_of_groups_is_no_recursion_error():
    depth = 5000
    text = "\n".join(f"GROUP g{level} g{level + 1}" for level in range(depth)) + "\nGROUP g5000 u"
    assert parse_acl(text).users_by_group["g0"] == frozenset({"u"})
    error = parse_error(text + " g0")
    assert (error.line, error.column) == (depth + 1, 15)


# --- matching ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("pattern", "value", "matches"),
    [
        ("abc", "abc", True),
        ("abc", "abcd", False),
        ("*", "", True),
        ("*", "anything", True),
        ("amq.*", "amq.direct", True),
        ("amq.*", "amq.", True),
        ("amq.*", "amq", False),
        ("*.RequestQueue", "example.RequestQueue", True),
        ("a*b*c", "abc", True),
        ("a*b*c", "aXbYbZc", True),
        ("a*b*c", "acb", False),
        ("ab*ba", "aba", False),
        ("**", "x", True),
        ("a*", "A", False),
    ],
)
def test_wildcards_stand_for_any_run_of_characters(pattern: str, value: str, matches: bool):
    assert wildcard_matches(pattern, value) is matches


def test_a_wildcard_property_matches_names_that_fit_it():
    rules = parse_acl('ACL ALLOW bob ALL QUEUE name="tmp.*"\nACL ALLOW bob ALL EXCHANGE name=*')
    assert check(rules, "bob", Action.DELETE, ObjectType.QUEUE, NAME="tmp.1").allowed
    assert not check(rules, "bob", Action.DELETE, ObjectType.QUEUE, NAME="orders").allowed
    assert check(rules, "bob", Action.DELETE, ObjectType.EXCHANGE, NAME="").allowed


def test_boolean_properties_compare_in_any_case():
    rules = parse_acl("ACL ALLOW bob CREATE QUEUE durable=FALSE exclusive=True")
    assert check(
        rules, "bob", Action.CREATE, ObjectType.QUEUE, DURABLE="false", EXCLUSIVE="TRUE"
    ).allowed
    assert not check(
        rules, "bob", Action.CREATE, ObjectType.QUEUE, DURABLE="true", EXCLUSIVE="true"
    ).allowed


def test_string_properties_are_case_sensitive():
    rules = parse_acl("ACL ALLOW bob CREATE QUEUE name=Orders")
    assert not check(rules, "bob", Action.CREATE, ObjectType.QUEUE, NAME="orders").allowed


def test_a_rule_property_the_request_lacks_does_not_match():
    """§2.2.2: "The rule may be augmented with one or more properties, restricting the rule's
    applicability." """
    rules = parse_acl("ACL ALLOW bob CREATE QUEUE name=*")
    assert not check(rules, "bob", Action.CREATE, ObjectType.QUEUE).allowed
    assert check(rules, "bob", Action.CREATE, ObjectType.QUEUE, NAME="q").allowed


def test_request_properties_the_rule_does_not_name_do_not_matter():
    rules = parse_acl("ACL ALLOW bob CREATE QUEUE name=q")
    decision = check(rules, "bob", Action.CREATE, ObjectType.QUEUE, NAME="q", DURABLE="true")
    assert decision.allowed


def test_action_and_object_must_match_unless_all():
    rules = parse_acl("ACL ALLOW bob CREATE QUEUE\nACL ALLOW bob ALL EXCHANGE\nACL ALLOW bob PURGE")
    assert check(rules, "bob", Action.CREATE, ObjectType.QUEUE).line == 1
    assert not check(rules, "bob", Action.DELETE, ObjectType.QUEUE).allowed
    assert check(rules, "bob", Action.DELETE, ObjectType.EXCHANGE).line == 2
    assert check(rules, "bob", Action.PURGE, ObjectType.QUEUE).line == 3
    assert not check(rules, "bob", Action.CREATE, ObjectType.VIRTUALHOST).allowed


def test_user_names_match_exactly():
    rules = parse_acl("ACL ALLOW bob ALL")
    assert not check(rules, "Bob", Action.CREATE, ObjectType.QUEUE).allowed
    assert not check(rules, "bobby", Action.CREATE, ObjectType.QUEUE).allowed


# --- decisions -----------------------------------------------------------------------------------


def test_the_first_matching_rule_decides():
    """§2.2.2: "if the user bob tries to create an exchange "myexch", the operation will be
    allowed by the first rule. The second rule will never be considered." """
    seed = 'ACL ALLOW bob ALL EXCHANGE ACL DENY bob CREATE EXCHANGE name="myexch" # Dead rule'
    text = 'ACL ALLOW bob ALL EXCHANGE\nACL DENY bob CREATE EXCHANGE name="myexch" # Dead rule\n'
    assert squeezed(text) == seed
    decision = check(parse_acl(text), "bob", Action.CREATE, ObjectType.EXCHANGE, NAME="myexch")
    assert (decision.allowed, decision.line) == (True, 1)


def test_reversed_rules_allow_all_exchanges_but_one():
    """§2.2.2: "If the desire is to allow bob to create all exchanges except "myexch", order of
    the rules must be reversed" """
    seed = 'ACL DENY bob CREATE EXCHANGE name="myexch" ACL ALLOW bob ALL EXCHANGE'
    text = 'ACL DENY bob CREATE EXCHANGE name="myexch"\nACL ALLOW bob ALL EXCHANGE\n'
    assert squeezed(text) == seed
    rules = parse_acl(text)
    denied = check(rules, "bob", Action.CREATE, ObjectType.EXCHANGE, NAME="myexch")
    assert (denied.allowed, denied.line) == (False, 1)
    allowed = check(rules, "bob", Action.CREATE, ObjectType.EXCHANGE, NAME="other")
    assert (allowed.allowed, allowed.line) == (True, 2)


def test_anything_no_rule_matches_is_denied_without_a_log_line():
    """§2.2.2: "All ACL files end with a implict rule denying all operations to all users. It is
    as if each file ends with ACL DENY ALL ALL" """
    implicit = Decision(allowed=False, log=False, rule=None)
    assert check(parse_acl(""), "bob", Action.ACCESS, ObjectType.VIRTUALHOST) == implicit
    rules = parse_acl("GROUP admins alice\nACL ALLOW admins ALL")
    decision = check(rules, "stranger", Action.ACCESS, ObjectType.VIRTUALHOST)
    assert decision == implicit
    assert decision.line is None


def test_allow_all_all_allows_everything():
    """§2.2.2: "To allow all operations, other than those controlled by earlier use ACL ALLOW
    ALL ALL instead." """
    rules = parse_acl("ACL DENY bob DELETE QUEUE\nACL ALLOW ALL ALL")
    assert not check(rules, "bob", Action.DELETE, ObjectType.QUEUE).allowed
    assert check(rules, "bob", Action.DELETE, ObjectType.EXCHANGE).allowed
    assert check(rules, "anyone", Action.PUBLISH, ObjectType.EXCHANGE, NAME="x").allowed


@pytest.mark.parametrize(
    ("permission", "allowed", "log"),
    [
        ("ALLOW", True, False),
        ("ALLOW-LOG", True, True),
        ("DENY", False, False),
        ("DENY-LOG", False, True),
    ],
)
def test_the_permission_says_whether_to_allow_and_whether_to_log(
    permission: str, allowed: bool, log: bool
):
    """Table 2.2: "ALLOW-LOG Allow the action and log the action in the log"."""
    rules = parse_acl(f"\nACL {permission} bob PURGE QUEUE")
    decision = check(rules, "bob", Action.PURGE, ObjectType.QUEUE)
    assert decision == Decision(allowed=allowed, log=log, rule=rules.rules[0])
    assert decision.line == 2


def test_deny_log_all_all_logs_every_denial():
    """§2.2.2: "ACL DENY-LOG ALL ALL which will cause the Broker to deny all operations with
    details of the denial logged to the Qpid log file." """
    decision = check(parse_acl("ACL DENY-LOG ALL ALL"), "bob", Action.BIND, ObjectType.EXCHANGE)
    assert (decision.allowed, decision.log, decision.line) == (False, True, 1)


# --- the worked examples of §2.2.4 ---------------------------------------------------------------

#: The seed's example files show elided rules as lines of "..."; they are not ACL syntax.
ELISION = "..."


def without_elisions(text: str) -> str:
    """The example with each "..." line made a comment, so the line numbers stay the seed's."""
    return "\n".join(f"# {line}" if line.startswith(ELISION) else line for line in text.split("\n"))


#: §2.2.4.1, as the seed writes it (this one keeps its line breaks).
EXAMPLE_1 = """\
# Give operator permission to execute all JMX Methods
ACL ALLOW operator ALL METHOD
# Give operator permission to execute only read-only JMX Methods
ACL ALLOW readonly ACCESS METHOD
# Deny operator/readonly permission to perform messaging.
ACL DENY operator ACCESS VIRTUALHOST
ACL DENY readonly ACCESS VIRTUALHOST
ACL DENY readonly ACCESS VIRTUALHOST
...
... rules for other users
...
# Explicitly deny all (log) to eveyone
ACL DENY-LOG ALL ALL
"""

#: §2.2.4.2 as the seed has it: every line of the file run together into one.
EXAMPLE_2_IN_SEED = (
    "# Create a group usermaint with members bob and alice GROUP usermaint bob alice # Give "
    'operator permission to execute all JMX Methods ACL ALLOW usermaint ALL METHOD component="'
    'UserManagement" ACL DENY ALL ALL METHOD component="UserManagement" ... ... rules for other '
    "users ... ACL DENY-LOG ALL ALL"
)
#: The same with its line breaks restored.
EXAMPLE_2 = """\
# Create a group usermaint with members bob and alice
GROUP usermaint bob alice
# Give operator permission to execute all JMX Methods
ACL ALLOW usermaint ALL METHOD component="UserManagement"
ACL DENY ALL ALL METHOD component="UserManagement"
...
... rules for other users
...
ACL DENY-LOG ALL ALL
"""

#: §2.2.4.3 as the seed has it: ten lines keep their breaks (the comments cut short at the
#: page edge), the rest of the file is run together into one line.
EXAMPLE_3_IN_SEED = (
    "# Allow client and server to connect to the virtual host.\n"
    "ACL ALLOW client ACCESS VIRTUALHOST\n"
    "ACL ALLOW server ACCESS VIRTUALHOST\n"
    "# Client side\n"
    "# Allow the 'client' user to publish requests to the request queue. As\n"
    "# is required to create a temporary queue on which the server will resp\n"
    "# of the temporary queues and consumption of messages from it.\n"
    'ACL ALLOW client CREATE QUEUE temporary="true"\n'
    'ACL ALLOW client CONSUME QUEUE temporary="true"\n'
    'ACL ALLOW client DELETE QUEUE temporary="true"\n'
    'ACL ALLOW client BIND EXCHANGE name="amq.direct" temporary="true" ACL ALLOW client UNBIND '
    'EXCHANGE name="amq.direct" temporary="true" ACL ALLOW client PUBLISH EXCHANGE name="amq.'
    "direct\" routingKey=\"example # Server side # Allow the 'server' user to consume from the "
    "request queue and publish # client. We also allow the server to create the request queue. "
    'ACL ALLOW server CREATE QUEUE name="example.RequestQueue" ACL ALLOW server CONSUME QUEUE '
    'name="example.RequestQueue" ACL ALLOW server BIND EXCHANGE ACL ALLOW server PUBLISH '
    'EXCHANGE name="amq.direct" routingKey="TempQueue" ACL ALLOW server PUBLISH EXCHANGE name='
    '"amq.direct" routingKey="TempQueue"\n'
)
#: The page edge cut `routingKey="example` short, leaving its quote open; it is the request
#: queue, which the client publishes to through amq.direct (the server consumes from
#: "example.RequestQueue", and amq.direct routes by queue name).
CUT_SHORT = 'routingKey="example '
REPAIRED = 'routingKey="example.RequestQueue" '
#: The same with its line breaks restored and that one value repaired.
EXAMPLE_3 = """\
# Allow client and server to connect to the virtual host.
ACL ALLOW client ACCESS VIRTUALHOST
ACL ALLOW server ACCESS VIRTUALHOST
# Client side
# Allow the 'client' user to publish requests to the request queue. As
# is required to create a temporary queue on which the server will resp
# of the temporary queues and consumption of messages from it.
ACL ALLOW client CREATE QUEUE temporary="true"
ACL ALLOW client CONSUME QUEUE temporary="true"
ACL ALLOW client DELETE QUEUE temporary="true"
ACL ALLOW client BIND EXCHANGE name="amq.direct" temporary="true"
ACL ALLOW client UNBIND EXCHANGE name="amq.direct" temporary="true"
ACL ALLOW client PUBLISH EXCHANGE name="amq.direct" routingKey="example.RequestQueue"
# Server side
# Allow the 'server' user to consume from the request queue and publish
# client. We also allow the server to create the request queue.
ACL ALLOW server CREATE QUEUE name="example.RequestQueue"
ACL ALLOW server CONSUME QUEUE name="example.RequestQueue"
ACL ALLOW server BIND EXCHANGE
ACL ALLOW server PUBLISH EXCHANGE name="amq.direct" routingKey="TempQueue"
ACL ALLOW server PUBLISH EXCHANGE name="amq.direct" routingKey="TempQueue"
"""


def test_the_examples_are_the_seed_text():
    assert squeezed(EXAMPLE_2) == EXAMPLE_2_IN_SEED
    assert squeezed(EXAMPLE_3) == squeezed(EXAMPLE_3_IN_SEED.replace(CUT_SHORT, REPAIRED))


def test_the_elisions_of_the_examples_are_not_acl_syntax():
    error = parse_error(EXAMPLE_1)
    assert (error.line, error.column, error.message) == (
        9,
        1,
        "unknown keyword '...': a line starts with ACL or GROUP",
    )


def test_the_cut_short_routing_key_of_example_3_as_extracted_is_an_error():
    """The open quote of `routingKey="example` pairs with the next quote, and so on along the
    line, leaving its last quote open."""
    error = parse_error(EXAMPLE_3_IN_SEED)
    run_together = EXAMPLE_3_IN_SEED.split("\n")[10]
    assert (error.line, error.column) == (11, len(run_together))
    assert error.message == 'quote " is not closed on its line'


def test_worked_example_1_operator_may_do_all_management():
    """§2.2.4.1: "a user 'operator' must be able to perform all Management operations" """
    rules = parse_acl(without_elisions(EXAMPLE_1))
    for action in Action:
        decision = check(rules, "operator", action, ObjectType.METHOD, COMPONENT="UserManagement")
        assert (decision.allowed, decision.line) == (True, 2)


def test_worked_example_1_readonly_may_only_read():
    """§2.2.4.1: "a user 'readonly' must be enable to perform only read-only functions" """
    rules = parse_acl(without_elisions(EXAMPLE_1))
    read = check(rules, "readonly", Action.ACCESS, ObjectType.METHOD, NAME="viewQueue")
    assert (read.allowed, read.line) == (True, 4)
    update = check(rules, "readonly", Action.UPDATE, ObjectType.METHOD, NAME="deleteQueue")
    assert (update.allowed, update.log, update.line) == (False, True, 13)


def test_worked_example_1_neither_may_connect_for_messaging():
    """§2.2.4.1: "Neither 'operator' nor 'readonly' should be allow to connect for messaging." """
    rules = parse_acl(without_elisions(EXAMPLE_1))
    operator = check(rules, "operator", Action.ACCESS, ObjectType.VIRTUALHOST, NAME="test")
    assert (operator.allowed, operator.log, operator.line) == (False, False, 6)
    readonly = check(rules, "readonly", Action.ACCESS, ObjectType.VIRTUALHOST, NAME="test")
    assert (readonly.allowed, readonly.log, readonly.line) == (False, False, 7)


def test_worked_example_1_everyone_else_is_denied_and_logged():
    """§2.2.4.1: "# Explicitly deny all (log) to eveyone" """
    rules = parse_acl(without_elisions(EXAMPLE_1))
    for user, action, object_type in [
        ("guest", Action.ACCESS, ObjectType.VIRTUALHOST),
        ("guest", Action.ACCESS, ObjectType.METHOD),
        ("operator", Action.PUBLISH, ObjectType.EXCHANGE),
    ]:
        decision = check(rules, user, action, object_type)
        assert (decision.allowed, decision.log, decision.line) == (False, True, 13)


def test_worked_example_2_only_usermaint_may_maintain_users():
    """§2.2.4.2: "Suppose you wish to restrict User Management operations to users belonging to
    a group 'usermaint'. No other user is allowed to perform user maintainence" """
    rules = parse_acl(without_elisions(EXAMPLE_2))
    assert rules.users_by_group == {"usermaint": frozenset({"bob", "alice"})}
    for user in ("bob", "alice"):
        for action in (Action.ACCESS, Action.UPDATE, Action.DELETE):
            decision = check(rules, user, action, ObjectType.METHOD, COMPONENT="UserManagement")
            assert (decision.allowed, decision.line) == (True, 4)
    other = check(rules, "carol", Action.UPDATE, ObjectType.METHOD, COMPONENT="UserManagement")
    assert (other.allowed, other.log, other.line) == (False, False, 5)


def test_worked_example_2_grants_usermaint_no_other_component():
    """§2.2.4.2: "This example illustrates the permissioning of a individual component" """
    rules = parse_acl(without_elisions(EXAMPLE_2))
    logging = check(rules, "bob", Action.UPDATE, ObjectType.METHOD, COMPONENT="LoggingManagement")
    assert (logging.allowed, logging.log, logging.line) == (False, True, 9)
    unnamed = check(rules, "bob", Action.UPDATE, ObjectType.METHOD)
    assert (unnamed.allowed, unnamed.log, unnamed.line) == (False, True, 9)


def test_worked_example_3_both_may_connect():
    """§2.2.4.3: "# Allow client and server to connect to the virtual host." """
    rules = parse_acl(EXAMPLE_3)
    assert check(rules, "client", Action.ACCESS, ObjectType.VIRTUALHOST, NAME="test").line == 2
    assert check(rules, "server", Action.ACCESS, ObjectType.VIRTUALHOST, NAME="test").line == 3
    assert not check(rules, "guest", Action.ACCESS, ObjectType.VIRTUALHOST, NAME="test").allowed


def test_worked_example_3_client_publishes_requests_and_reads_a_temporary_queue():
    """§2.2.4.3: "Two users: 'client' publishes requests" and "# Allow the 'client' user to
    publish requests to the request queue. As # is required to create a temporary queue on which
    the server will resp # of the temporary queues and consumption of messages from it." """
    rules = parse_acl(EXAMPLE_3)
    temporary = {"NAME": "TempQueue42", "TEMPORARY": "true"}
    for action, line in [(Action.CREATE, 8), (Action.CONSUME, 9), (Action.DELETE, 10)]:
        decision = check(rules, "client", action, ObjectType.QUEUE, **temporary)
        assert (decision.allowed, decision.line) == (True, line)
    bind = {"NAME": "amq.direct", "QUEUE_NAME": "TempQueue42", "ROUTING_KEY": "TempQueue42"}
    bind["TEMPORARY"] = "true"
    assert check(rules, "client", Action.BIND, ObjectType.EXCHANGE, **bind).line == 11
    assert check(rules, "client", Action.UNBIND, ObjectType.EXCHANGE, **bind).line == 12
    request = {"NAME": "amq.direct", "ROUTING_KEY": "example.RequestQueue"}
    assert check(rules, "client", Action.PUBLISH, ObjectType.EXCHANGE, **request).line == 13


def test_worked_example_3_client_may_do_nothing_else():
    rules = parse_acl(EXAMPLE_3)
    durable = {"NAME": "orders", "TEMPORARY": "false", "DURABLE": "true"}
    assert not check(rules, "client", Action.CREATE, ObjectType.QUEUE, **durable).allowed
    request_queue = {"NAME": "example.RequestQueue", "TEMPORARY": "false"}
    assert not check(rules, "client", Action.CONSUME, ObjectType.QUEUE, **request_queue).allowed
    topic_bind = {"NAME": "amq.topic", "QUEUE_NAME": "TempQueue42", "TEMPORARY": "true"}
    assert not check(rules, "client", Action.BIND, ObjectType.EXCHANGE, **topic_bind).allowed
    elsewhere = {"NAME": "amq.direct", "ROUTING_KEY": "TempQueue42"}
    decision = check(rules, "client", Action.PUBLISH, ObjectType.EXCHANGE, **elsewhere)
    # The seed's copy of the file lost its final `ACL DENY-LOG all all`: the implicit deny.
    assert decision == Decision(allowed=False, log=False, rule=None)


def test_worked_example_3_server_consumes_requests_and_publishes_responses():
    """§2.2.4.3: "'server' consumes the requests and generates a response" and "We also allow
    the server to create the request queue." """
    rules = parse_acl(EXAMPLE_3)
    request_queue = {"NAME": "example.RequestQueue", "DURABLE": "false", "TEMPORARY": "false"}
    assert check(rules, "server", Action.CREATE, ObjectType.QUEUE, **request_queue).line == 17
    assert check(rules, "server", Action.CONSUME, ObjectType.QUEUE, **request_queue).line == 18
    bind = {"NAME": "amq.direct", "QUEUE_NAME": "example.RequestQueue", "TEMPORARY": "false"}
    assert check(rules, "server", Action.BIND, ObjectType.EXCHANGE, **bind).line == 19
    response = {"NAME": "amq.direct", "ROUTING_KEY": "TempQueue"}
    assert check(rules, "server", Action.PUBLISH, ObjectType.EXCHANGE, **response).line == 20


def test_worked_example_3_server_may_do_nothing_else():
    rules = parse_acl(EXAMPLE_3)
    other_queue = {"NAME": "orders", "TEMPORARY": "false"}
    assert not check(rules, "server", Action.CREATE, ObjectType.QUEUE, **other_queue).allowed
    assert not check(rules, "server", Action.CONSUME, ObjectType.QUEUE, **other_queue).allowed
    to_itself = {"NAME": "amq.direct", "ROUTING_KEY": "example.RequestQueue"}
    assert not check(rules, "server", Action.PUBLISH, ObjectType.EXCHANGE, **to_itself).allowed
    # As the seed writes it, "TempQueue" has no `*`: only that exact routing key is allowed.
    longer = {"NAME": "amq.direct", "ROUTING_KEY": "TempQueue42"}
    assert not check(rules, "server", Action.PUBLISH, ObjectType.EXCHANGE, **longer).allowed
    assert not check(rules, "server", Action.DELETE, ObjectType.QUEUE, **other_queue).allowed


# --- reading files -------------------------------------------------------------------------------


def test_load_acl_file_names_the_file_in_errors(tmp_path: Path):
    acl = tmp_path / "broker.acl"
    acl.write_text("ACL ALLOW bob ALL\nACL ALLOW bob PUBLSH\n", encoding="utf-8")
    with pytest.raises(AclSyntaxError) as raised:
        load_acl_file(acl)
    assert str(raised.value) == f"{acl}:2:15: unknown action 'PUBLSH'"


def test_load_acl_file_reads_utf8_and_ignores_a_byte_order_mark(tmp_path: Path):
    acl = tmp_path / "broker.acl"
    acl.write_bytes("\ufeffACL ALLOW j\u00f3zef ALL\n".encode())
    rules = load_acl_file(str(acl))
    assert rules.rules[0].subject == "j\u00f3zef"


def test_load_acl_file_rejects_text_that_is_not_utf8(tmp_path: Path):
    acl = tmp_path / "broker.acl"
    acl.write_bytes("ACL ALLOW bob ALL\nACL ALLOW j\u00f3".encode() + b"\xff ALL\n")
    with pytest.raises(AclSyntaxError) as raised:
        load_acl_file(acl)
    error = raised.value
    assert (error.path, error.line, error.column) == (str(acl), 2, 13)
    assert error.message == "the file is not UTF-8 text"


def test_a_missing_file_is_an_acl_file_error_naming_it(tmp_path: Path):
    missing = tmp_path / "missing.acl"
    with pytest.raises(AclFileError) as raised:
        load_acl_file(missing)
    assert raised.value.path == str(missing)
    assert str(raised.value) == f"cannot read ACL file {missing}: No such file or directory"


def test_a_directory_is_an_acl_file_error(tmp_path: Path):
    with pytest.raises(AclFileError) as raised:
        load_acl_file(tmp_path)
    assert raised.value.path == str(tmp_path)
