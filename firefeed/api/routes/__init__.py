"""The API's endpoints, one module per resource; each endpoint parses, calls one function, returns."""
