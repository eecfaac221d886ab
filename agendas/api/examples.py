"""Request examples for the API docs: what a client really sends to submit and run agendas.

Each body is valid as it stands; on the demo farm (`make run`) the operations map to the
`transcode` insight, whose worker also runs `mediainfo`.
"""

from drf_spectacular.utils import OpenApiExample

CLIP = "/media/in/clip.mov"

PROBE = {"name": "probe", "type": "mediainfo", "payload": {"input": CLIP}}
TRANSCODE = {
    "name": "transcode",
    "type": "transcode",
    "payload": {
        "input": CLIP,
        "output": "/media/out/clip-720p.mp4",
        "height": 720,
        "video_codec": "libx264",
        "duration": "@<probe.out::/summary/duration>",
    },
    "depends_on": ["probe"],
    "timeout_seconds": 3600,
}

SUBMIT_EXAMPLES = [
    OpenApiExample(
        "Probe and transcode",
        summary="Probe and transcode a clip",
        description="Two operations: the transcode waits for the probe and reads the clip's "
        "duration from its result through an @<…> reference. The link id groups it with the "
        "campaign's other agendas (`progress-summary/?link_id=`).",
        value={
            "operations": [PROBE, TRANSCODE],
            "link_id": "spring-campaign",
            "external_id": "clip-0042",
            "priority": 7,
            "labels": {"project": "spring-campaign", "source": "upload"},
        },
        request_only=True,
    ),
    OpenApiExample(
        "Probe later",
        summary="One operation, not before a given time",
        value={
            "operations": [PROBE],
            "priority": 2,
            "run_after": "2030-01-01T02:00:00Z",
            "labels": {"project": "archive"},
            "callback_url": "https://hooks.example.com/pop",
        },
        request_only=True,
    ),
]

BULK_EXAMPLES = [
    OpenApiExample(
        "Two clips",
        summary="Two clips, each with its own idempotency key",
        description="Each item is accepted or refused on its own; a repeat of an item's "
        "`idempotency_key` returns the agenda the first one created.",
        value={
            "agendas": [
                {
                    "operations": [
                        {"name": "probe", "type": "mediainfo", "payload": {"input": CLIP}},
                    ],
                    "idempotency_key": "clip-0042-probe",
                    "link_id": "spring-campaign",
                    "labels": {"project": "spring-campaign"},
                },
                {
                    "operations": [
                        {
                            "name": "probe",
                            "type": "mediainfo",
                            "payload": {"input": "/media/in/trailer.mov"},
                        },
                    ],
                    "idempotency_key": "trailer-0007-probe",
                    "link_id": "spring-campaign",
                    "priority": 8,
                    "labels": {"project": "spring-campaign"},
                },
            ]
        },
        request_only=True,
    ),
]

TEMPLATE_RUN_EXAMPLES = [
    OpenApiExample(
        "Transcode and package",
        summary="Run the demo's transcode-and-package template",
        description="`payload` becomes @<pop.payload>: this template needs `input` and "
        "`output_dir` (its payload schema says so). The options override the template's.",
        value={
            "payload": {"input": CLIP, "output_dir": "/media/out/clip-0042"},
            "link_id": "spring-campaign",
            "external_id": "clip-0042",
            "priority": 6,
            "labels": {"project": "spring-campaign"},
        },
        request_only=True,
    ),
]
