"""cftools: author, verify, release and evaluate counterfactual multimodal benchmarks."""

__version__ = "0.1.0"
