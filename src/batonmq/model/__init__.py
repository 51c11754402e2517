"""Plain data of the broker: no IO, no behaviour beyond what the data itself implies."""
