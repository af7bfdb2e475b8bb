"""Explaining a model: attention maps, rollouts, token norms and the figures that show them."""
