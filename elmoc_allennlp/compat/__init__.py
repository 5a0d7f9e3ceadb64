"""Compatibility shims for allennlp 2.10.1: each module says which problem it works around."""
