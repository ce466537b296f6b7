"""release: export accepted items as a versioned, verifiable dataset; verify it; read it back."""
