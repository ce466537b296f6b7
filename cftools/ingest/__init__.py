"""ingest: read source questions, images and existing items into the store."""
