"""Small shared helpers: atomic writes, packaged resources, YAML with node marks."""
