"""Models built on :mod:`vkumd.ops`: loaders for Hugging Face files and BERT encoders."""
