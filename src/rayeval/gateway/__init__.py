"""The model gateway: units reach their models only through it (see :mod:`.server`)."""
