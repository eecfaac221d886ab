import os
from pathlib import Path

from django.core.management.base import BaseCommand

from popsite.demo import demo_load


class Command(BaseCommand):
    help = "Load the demo data (idempotent) and print the logins."

    def add_arguments(self, parser) -> None:
        parser.add_argument(
            "--token-file",
            help="Write the demo worker's API token here (mode 0600); a token already there "
            "that still works is kept.",
        )
        parser.add_argument(
            "--sample-media",
            help="A clip on this machine: the first load also runs the transcode-and-package "
            "template on it.",
        )

    def handle(
        self, *args, token_file: str | None = None, sample_media: str | None = None, **options
    ) -> None:
        path = Path(token_file) if token_file else None
        previous = path.read_text().strip() if path is not None and path.is_file() else ""
        sample = sample_media if sample_media and Path(sample_media).is_file() else ""
        summary = demo_load(worker_token=previous, sample_media=sample)
        if path is not None:
            path.parent.mkdir(parents=True, exist_ok=True)
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
            with os.fdopen(fd, "w") as handle:
                handle.write(summary.worker_token)
            path.chmod(0o600)
        self.stdout.write(f"Demo data ready ({summary.agendas_created} new agendas).")
        for username, password in summary.logins:
            self.stdout.write(f"  login: {username} / {password}")
