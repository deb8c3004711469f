"""The container images (Containerfile): their build context and a base image made without a
registry (build.py)."""
