"""Code that runs inside worker processes (reference and candidate alike); the parent never calls it directly."""
