"""Training and evaluation support: metrics over ``frognano eval`` episodes."""
