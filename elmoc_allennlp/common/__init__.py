"""Cross-cutting utilities: atomic files, writer locks, disk-full errors, thread settings, torch-version
checks, the shim installer, and the one reader of model archives (`archives/`)."""
