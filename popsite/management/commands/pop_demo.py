from pathlib import Path

from django.core.management.base import BaseCommand

from popsite.demo import demo_load


class Command(BaseCommand):
    help = "Load the demo data (idempotent) and print the logins."

    def add_arguments(self, parser) -> None:
        parser.add_argument("--token-file", help="Write the demo worker's API token here.")

    def handle(self, *args, token_file: str | None = None, **options) -> None:
        summary = demo_load()
        if token_file:
            Path(token_file).parent.mkdir(parents=True, exist_ok=True)
            Path(token_file).write_text(summary.worker_token)
        self.stdout.write(f"Demo data ready ({summary.agendas_created} new agendas).")
        for username, password in summary.logins:
            self.stdout.write(f"  login: {username} / {password}")
