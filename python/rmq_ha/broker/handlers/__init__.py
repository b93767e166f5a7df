"""Request handlers of the broker, one module per concern. Each `register(d, p, ...)` puts its
handlers on a dispatcher; they depend on `ports.Ports` (and small callables the wiring passes),
never on the `Broker` object."""
