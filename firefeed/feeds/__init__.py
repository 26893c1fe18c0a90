"""Feed URLs (SPEC 10 C4-C5): an export's last published file at `/feeds/{feed_id}/{file name}`.

- `store`: the feed ids in the control plane (created, rotated, listed) and the last fetch of each;
- `index`: what an API process knows about every feed id, refreshed by a cheap version check;
- `files`: opening the published file the index names, whole, on a local folder or a bucket;
- `http`: the lean ASGI handler that answers `GET`/`HEAD /feeds/...` before FastAPI's machinery;
- `fetches`: the last fetch per export, buffered and written at most once per export every few seconds.
"""
