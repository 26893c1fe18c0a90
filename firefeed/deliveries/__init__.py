"""Deliveries: each run's published files handed to the export's targets (SPEC 10 C7, docs/deliveries.md).

    plan.py      which deliver jobs a run creates after its publish, and the warnings of their outcomes
    deliver.py   one deliver job: the file, `unchanged` or the upload, retries, the alert of a failure
    http_put.py  an https:// target: a streamed PUT through the fetcher's host rules
    store.py     the SQL: what each target last received, a run's deliver jobs, reopening one to retry

Uploads to file servers live beside the downloads: firefeed/pipeline/transfer/upload.py.
A delivery is a step job (`pipeline_jobs`, kind `deliver`), claimed, leased and re-sent as any other.
"""
