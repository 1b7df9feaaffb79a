"""Pure decisions: desired server config, differences from the server, conditions. No I/O here."""
