"""kvlab: measure, model and report long-context LLM serving (vLLM vs SGLang)."""

__version__ = "0.1.0"
