"""vcemu coordinator: the model, pure policies, the engine, cluster backends and the services around them."""
