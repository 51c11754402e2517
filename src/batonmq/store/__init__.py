"""The persistent store: the `Store` protocol (base), its implementations (sqlite, postgres), and
the journal that batches the engine's changes into group commits."""
