"""Live-server tests. A package, so the `live` fixture (package scope) stops the server and
the cluster when this folder is done, not at the end of the whole session."""
