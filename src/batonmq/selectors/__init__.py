"""JMS message selectors: SQL-92 conditional expressions over a message's headers and properties.

Given as the basic.consume argument `x-selector` or Qpid's binding argument
`x-filter-jms-selector`. The grammar and semantics are JMS 1.1's (javax.jms.Message, "Message
Selectors"):

    selector = parse_selector("JMSPriority > 4 AND colour IN ('red', 'blue')")
    if selector.matches(jms_values(message.properties)):
        ...

A selector that does not parse raises SelectorSyntaxError, a ValueError with the 0-based
`position` of the error and a `message`; the broker answers it with 406 PRECONDITION_FAILED.
"""

from batonmq.selectors.errors import MAX_NESTING_DEPTH, MAX_SELECTOR_LENGTH, SelectorSyntaxError
from batonmq.selectors.jms import JMS_HEADER_FIELDS, JmsValues, jms_values
from batonmq.selectors.lexer import is_identifier
from batonmq.selectors.selector import Selector, parse_selector

__all__ = [
    "JMS_HEADER_FIELDS",
    "MAX_NESTING_DEPTH",
    "MAX_SELECTOR_LENGTH",
    "JmsValues",
    "Selector",
    "SelectorSyntaxError",
    "is_identifier",
    "jms_values",
    "parse_selector",
]
