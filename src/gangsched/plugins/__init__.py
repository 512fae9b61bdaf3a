"""Built-in plugins. Each module is one plugin; plugins never import each other."""
