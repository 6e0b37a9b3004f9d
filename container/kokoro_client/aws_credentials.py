"""AWS credentials for the HTTP/2 SDK, found the way boto3 finds them.

The smithy-based SDK (aws-sdk-sagemaker-runtime-http2) resolves environment variables, profile keys and
credential_process on its own; container credentials, instance metadata, SSO and assumed-role profiles need
add-on packages. boto3's chain knows them all, and it is what the AgentCore runtime role, a deployer's
`aws sso login` and terraform's view of the account agree on.
"""

from __future__ import annotations

import asyncio
from typing import Any

from smithy_aws_core.identity import AWSCredentialsIdentity
from smithy_aws_core.identity.components import AWSIdentityProperties
from smithy_core.aio.interfaces.identity import IdentityResolver
from smithy_core.exceptions import SmithyIdentityError


class Boto3CredentialsResolver(IdentityResolver[AWSCredentialsIdentity, AWSIdentityProperties]):
    """Asked again on each signing, so refreshable credentials (a role's, SSO's) stay fresh."""

    def __init__(self, session: Any = None) -> None:
        import boto3

        self._session = session or boto3.Session()

    async def get_identity(self, *, properties: AWSIdentityProperties) -> AWSCredentialsIdentity:
        credentials = self._session.get_credentials()
        if credentials is None:
            raise SmithyIdentityError("boto3 found no AWS credentials")
        frozen = await asyncio.to_thread(credentials.get_frozen_credentials)
        return AWSCredentialsIdentity(
            access_key_id=frozen.access_key, secret_access_key=frozen.secret_key, session_token=frozen.token
        )
