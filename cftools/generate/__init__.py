"""generate: LLM and image generators run the same way (`llm_task`, `cftools.imagegen`); kinds declare them."""
