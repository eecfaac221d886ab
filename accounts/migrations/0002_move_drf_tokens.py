"""Move rest_framework.authtoken keys into accounts.ApiToken, hashed, and delete the originals.

Each legacy 40-character key keeps working (as the never-expiring token "legacy") because
knox finds a token by its first 15 characters and checks the SHA-512 hash of the whole key.
The plain-text keys are deleted: there is no way back, so the reverse does nothing.
"""

from django.db import migrations
from knox.crypto import hash_token
from knox.settings import CONSTANTS

LEGACY_NAME = "legacy"


def move_drf_tokens(apps, schema_editor):
    Token = apps.get_model("authtoken", "Token")
    ApiToken = apps.get_model("accounts", "ApiToken")
    legacy = list(Token.objects.all())
    ApiToken.objects.bulk_create(
        [
            ApiToken(
                digest=hash_token(token.key),
                token_key=token.key[: CONSTANTS.TOKEN_KEY_LENGTH],
                user_id=token.user_id,
                name=LEGACY_NAME,
                expiry=None,
            )
            for token in legacy
        ],
        ignore_conflicts=True,
    )
    # `created` is auto_now_add: keep the legacy creation time.
    for token in legacy:
        ApiToken.objects.filter(digest=hash_token(token.key)).update(created=token.created)
    Token.objects.filter(pk__in=[token.pk for token in legacy]).delete()


class Migration(migrations.Migration):
    dependencies = [
        ("accounts", "0001_initial"),
        ("authtoken", "0004_alter_tokenproxy_options"),
    ]

    operations = [migrations.RunPython(move_drf_tokens, migrations.RunPython.noop)]
