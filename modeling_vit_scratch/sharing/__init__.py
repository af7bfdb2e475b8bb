"""Sharing on the Hub: the push gate, the model card, the reload check."""
