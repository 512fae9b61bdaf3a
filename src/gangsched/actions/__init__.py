"""Built-in actions. Each module is one action; actions never import each other."""
