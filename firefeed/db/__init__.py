"""Database access: the engine, the control-plane models and their migrations."""
