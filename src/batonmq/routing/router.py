"""An exchange's router: its type's bindings, and bindings filtered by a JMS selector.

Qpid's binding argument `x-filter-jms-selector` makes a binding match only the messages whose
properties satisfy a JMS message selector (JMS 1.1, "Message Selectors"). The exchange type knows
nothing of it: bindings without a selector go to one instance of the type, and the bindings with
a selector go to one more instance of the type per distinct selector text, holding them without
the selector argument. A message goes to what the first instance routes it to, and to what a
selector's instance routes it to when the selector selects the message. So:

- an exchange with no selector bindings routes exactly as its type does, with one check more;
- a selector is parsed once, when the first binding with its text is made, and evaluated at most
  once per message, only when its bindings would add a destination, on the message's properties
  decoded only then;
- two bindings that differ only in their selector are two bindings, as for any other argument.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Final

from pamqp.common import FieldTable

from batonmq.model.destination import Destination
from batonmq.model.message import Message
from batonmq.routing.base import BindingArgumentError, ExchangeType, ExchangeTypeFactory
from batonmq.selectors import Selector, SelectorSyntaxError, jms_values, parse_selector

SELECTOR_ARGUMENT: Final = "x-filter-jms-selector"


#: The destination `Router.check` binds in a router of its own, thrown away.
_PROBE = Destination.queue("")


class Router:
    """The bindings of one exchange, routed by its exchange type and filtered by selectors."""

    __slots__ = ("_factory", "_needs_headers", "_selected", "_unfiltered")

    def __init__(self, factory: ExchangeTypeFactory) -> None:
        self._factory = factory
        self._unfiltered = factory()
        self._needs_headers = self._unfiltered.needs_headers
        #: selector text -> (the parsed selector, the bindings it filters)
        self._selected: dict[str, tuple[Selector, ExchangeType]] = {}

    def bind(self, destination: Destination, routing_key: str, arguments: FieldTable) -> bool:
        """Add a binding; False if an identical one already existed. Raises BindingArgumentError
        for arguments the exchange type refuses, or a selector that does not parse."""
        text = arguments.get(SELECTOR_ARGUMENT)
        if text is None:
            return self._unfiltered.bind(destination, routing_key, arguments)
        selected = self._selected.get(text) if isinstance(text, str) else None
        if selected is not None:
            return selected[1].bind(destination, routing_key, _without_selector(arguments))
        selector, bindings = parse_binding_selector(text), self._factory()
        # A refused binding raises here, before the new selector's index is kept.
        added = bindings.bind(destination, routing_key, _without_selector(arguments))
        self._selected[selector.text] = (selector, bindings)
        return added

    def check(self, routing_key: str, arguments: FieldTable) -> None:
        """Raise BindingArgumentError if `bind` would refuse these arguments; changes nothing."""
        Router(self._factory).bind(_PROBE, routing_key, arguments)

    def unbind(self, destination: Destination, routing_key: str, arguments: FieldTable) -> bool:
        """Remove one binding; False if there was no such binding."""
        text = arguments.get(SELECTOR_ARGUMENT)
        if text is None:
            return self._unfiltered.unbind(destination, routing_key, arguments)
        selected = self._selected.get(text) if isinstance(text, str) else None
        if selected is None:
            return False
        selector, bindings = selected
        if not bindings.unbind(destination, routing_key, _without_selector(arguments)):
            return False
        if not len(bindings):
            del self._selected[selector.text]
        return True

    def unbind_destination(self, destination: Destination) -> int:
        """Remove every binding to `destination`; returns how many there were."""
        removed = self._unfiltered.unbind_destination(destination)
        for text, (_selector, bindings) in list(self._selected.items()):
            removed += bindings.unbind_destination(destination)
            if not len(bindings):
                del self._selected[text]
        return removed

    def route(self, message: Message) -> set[Destination]:
        """The destinations `message` goes to through this exchange's bindings."""
        routing_key = message.routing_key
        headers = message.properties.headers if self._needs_headers else None
        destinations = self._unfiltered.route(routing_key, headers)
        if self._selected:
            values = None
            for selector, bindings in self._selected.values():
                candidates = bindings.route(routing_key, headers)
                if candidates <= destinations:
                    continue  # nothing to add: no need to evaluate the selector
                if values is None:
                    values = jms_values(message.properties)
                if selector.matches(values):
                    destinations |= candidates
        return destinations

    def bindings(self) -> Iterator[tuple[Destination, str, FieldTable]]:
        """Every binding, as (destination, routing key, arguments), selectors included."""
        yield from self._unfiltered.bindings()
        for text, (_selector, bindings) in self._selected.items():
            for destination, routing_key, arguments in bindings.bindings():
                yield destination, routing_key, {**arguments, SELECTOR_ARGUMENT: text}

    def __len__(self) -> int:
        return len(self._unfiltered) + sum(
            len(bindings) for _selector, bindings in self._selected.values()
        )


def parse_binding_selector(text: object) -> Selector:
    """The selector of an `x-filter-jms-selector` argument; BindingArgumentError (the engine's
    406) for one that is not a string or does not parse, naming the position of the error."""
    if not isinstance(text, str):
        raise BindingArgumentError(f"invalid arg '{SELECTOR_ARGUMENT}': {text!r} is not a string")
    try:
        return parse_selector(text)
    except SelectorSyntaxError as error:
        raise BindingArgumentError(f"invalid arg '{SELECTOR_ARGUMENT}': {error}") from error


def _without_selector(arguments: FieldTable) -> FieldTable:
    return {name: value for name, value in arguments.items() if name != SELECTOR_ARGUMENT}
