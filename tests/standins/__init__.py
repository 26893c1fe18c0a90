"""Local stand-ins for third-party APIs FireFeed talks to, written from their published REST references.

Each is a real HTTP server on 127.0.0.1 (in a thread for a test, or its own process for a bench), so the
code under test goes through its real HTTP client, auth and error handling; nothing leaves the machine.
"""
