"""Request examples for the API docs: a trigger fed by an object store's ObjectCreated
notification (through a signing relay, docs/design.md §5.4), and the event it receives."""

from drf_spectacular.utils import OpenApiExample

S3_EVENT = {
    "Records": [
        {
            "eventSource": "aws:s3",
            "eventName": "ObjectCreated:Put",
            "eventTime": "2030-01-01T02:00:00.000Z",
            "s3": {
                "bucket": {"name": "ingest"},
                "object": {
                    "key": "incoming/clip-0042.mov",
                    "size": 73400320,
                    "sequencer": "0065A1B2C3D4E5F601",
                },
            },
        }
    ]
}

TRIGGER_EXAMPLES = [
    OpenApiExample(
        "Object created",
        summary="Run a template for each new object under incoming/",
        description="The payload takes the object's key and bucket from the event; the "
        "filter skips other events (200 skipped); the sequencer is the event id, so a "
        "notification delivered twice runs once.",
        value={
            "name": "ingest-new-clips",
            "template": "6f1c3e0a-3d2b-4c5e-9a7f-0b1c2d3e4f50",
            "payload_mapping": {
                "path": "@</Records/0/s3/object/key>",
                "bucket": "@</Records/0/s3/bucket/name>",
                "url": "s3://@</Records/0/s3/bucket/name>/@</Records/0/s3/object/key>",
            },
            "filter": [
                {"pointer": "/Records/0/eventName", "prefix": "ObjectCreated:"},
                {"pointer": "/Records/0/s3/object/key", "prefix": "incoming/"},
            ],
            "labels": {"source": "ingest-bucket"},
            "event_id_pointer": "/Records/0/s3/object/sequencer",
        },
        request_only=True,
    ),
]

FIRE_EXAMPLES = [
    OpenApiExample(
        "ObjectCreated notification",
        summary="An S3-style ObjectCreated event, as a signing relay forwards it",
        value=S3_EVENT,
        request_only=True,
    ),
    OpenApiExample(
        "Submitted",
        value={
            "status": "submitted",
            "firing": "0b6f0c5e-8f7d-4f0e-9a57-2b8f3c1d4e6a",
            "agenda": "e839d0e0-5b1a-4f7c-8d2e-3a4b5c6d7e8f",
        },
        response_only=True,
        status_codes=["201"],
    ),
    OpenApiExample(
        "Duplicate",
        value={
            "status": "duplicate",
            "firing": "0b6f0c5e-8f7d-4f0e-9a57-2b8f3c1d4e6a",
            "agenda": "e839d0e0-5b1a-4f7c-8d2e-3a4b5c6d7e8f",
        },
        response_only=True,
        status_codes=["200"],
    ),
    OpenApiExample(
        "Skipped",
        value={
            "status": "skipped",
            "firing": "5d2e9a41-7c3b-4e8f-a1d6-9b0c2e4f6a8d",
            "reason": '/Records/0/eventName is "ObjectRemoved:Delete", not starting with '
            '"ObjectCreated:".',
        },
        response_only=True,
        status_codes=["200"],
    ),
]
