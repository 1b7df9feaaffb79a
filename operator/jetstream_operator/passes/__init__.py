"""One pass per resource and trigger: the envelope every kind's work runs in (`envelope`), and
each kind's part of it (`stream_backed`, `consumer`, `connection`)."""
