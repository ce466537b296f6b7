"""eval: ask a model every question of a release, read its answers and score them per kind."""
