"""annotate: push items to Label Studio as tasks, pull judgments back, decide, and measure agreement."""
