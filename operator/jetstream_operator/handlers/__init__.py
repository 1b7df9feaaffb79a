"""Handler bodies: gather the world, ask the pure layer what to do, do it, report it."""
