"""An exchange of a virtual host: its declared attributes and the bindings its type routes by."""

from __future__ import annotations

from dataclasses import dataclass, field

from pamqp.common import FieldTable

from batonmq.routing.base import ExchangeType


@dataclass(eq=False, slots=True)
class Exchange:
    name: str
    type_name: str
    router: ExchangeType
    durable: bool = False
    auto_delete: bool = False
    internal: bool = False
    arguments: FieldTable = field(default_factory=dict)

    @property
    def is_default(self) -> bool:
        return self.name == ""
