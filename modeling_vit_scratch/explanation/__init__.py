"""Explaining a model: attention maps, rollouts and the figures that show them."""
