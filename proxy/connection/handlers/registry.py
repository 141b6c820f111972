"""The per-API handler registry: api key -> handler, built once where the server is assembled.

The one place that knows which API is which: every other part of the connection core is told by a
handler's plan what a request is for. `standard_handlers` wires kqp's handlers to the process-wide
parts they consult; the server calls it in `ProxyServer._assemble` (and the playbook tests with their
own parts). Every dependency is an argument: no handler finds anything by itself.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

from kqp.protocol.apis import API_NAMES, ApiKey
from kqp.proxy.policies.authorization.acl_admin import ACL_APIS, AclAdmin
from kqp.proxy.policies.authorization.checks import RequestAuthorization
from kqp.proxy.policies.mutation_gate import CREATE_PARTITIONS, CREATE_TOPICS, DELETE_TOPICS, MutationGate
from kqp.proxy.policies.quota_admin import ADMIN_APIS, QuotaAdmin

from ..charging import Charging
from ..plans import Handler
from ..sasl import SaslPolicy
from .api_versions import ApiVersionsHandler
from .authorized import Authorized, CreateAclsHandler, DeleteAclsHandler, DescribeAclsHandler
from .client_quotas import AlterClientQuotasHandler, DescribeClientQuotasHandler
from .fetch import SHARE_FETCH, FetchHandler
from .mutations import MetadataHandler, MutationHandler
from .produce import ProduceHandler
from .sasl import SaslHandler

__all__ = ["SASL_APIS", "UNAUTHORIZED_APIS", "Handlers", "served_apis", "standard_handlers"]

PASS_THROUGH = Handler()   # every API without a handler of its own: the header only, both ways
SASL_APIS = frozenset({ApiKey.SaslHandshake, ApiKey.SaslAuthenticate})   # exempt from request quotas (KIP-124)
# What a broker serves without asking its authorizer (KIP-714's telemetry: any client may push).
UNAUTHORIZED_APIS = frozenset({ApiKey.ApiVersions, *SASL_APIS, ApiKey.GetTelemetrySubscriptions,
                               ApiKey.PushTelemetry})


class Handlers(dict[int, Handler]):
    """api key -> the handler of its family; every other API gets `default`. A dict, filled for every
    api key kqp knows, so the dispatcher's lookup is one C-level `[]` on every request."""

    def __init__(self, by_api: Mapping[int, Handler], default: Handler = PASS_THROUGH) -> None:
        super().__init__(dict.fromkeys(API_NAMES, default))
        self.update(by_api)
        self.default = default

    def __missing__(self, api_key: int) -> Handler:
        return self.default

    @property
    def apis(self) -> frozenset[int]:
        """The api keys with a handler of their own."""
        return frozenset(api for api, handler in self.items() if handler is not self.default)


def standard_handlers(charging: Charging, gate: MutationGate, sasl: SaslPolicy,
                      api_ranges: Callable[[], Mapping[int, tuple[int, int]]],
                      admin: QuotaAdmin | None = None, authorization: RequestAuthorization | None = None,
                      acl_admin: AclAdmin | None = None,
                      cluster_id: Callable[[], str | None] = lambda: None) -> Handlers:
    """kqp's handlers. `api_ranges` is what kqp and the upstream both speak, `cluster_id` the upstream's
    cluster (None: not known yet); `admin` set: kqp answers the quota admin API itself (else those
    requests go upstream like any other); `authorization` set: every other request is authorized
    first (`Authorized`), and `acl_admin` answers the ACL API."""
    advertisers = [sasl.advertised, *(() if admin is None else (admin.advertised,)),
                   *(() if acl_admin is None else (acl_admin.advertised,))]
    if authorization is not None:
        advertisers.insert(0, authorization.advertised)   # first: the APIs kqp answers are laid over it
    by_api: dict[int, Handler] = {
        ApiKey.Produce: ProduceHandler(charging, gate.topics),   # the topic cache: ids -> names for topic pools
        ApiKey.Fetch: FetchHandler(charging, gate.topics),
        ApiKey.ShareFetch: FetchHandler(charging, gate.topics, SHARE_FETCH),   # a share group's fetch (KIP-932)
        ApiKey.ApiVersions: ApiVersionsHandler(api_ranges, advertisers, cluster_id),
        ApiKey.Metadata: MetadataHandler(gate),
        ApiKey.CreateTopics: MutationHandler(gate, CREATE_TOPICS),
        ApiKey.DeleteTopics: MutationHandler(gate, DELETE_TOPICS),
        ApiKey.CreatePartitions: MutationHandler(gate, CREATE_PARTITIONS),
        ApiKey.SaslHandshake: SaslHandler(authenticate=False),
        ApiKey.SaslAuthenticate: SaslHandler(authenticate=True),
    }
    if admin is not None:
        by_api[ApiKey.DescribeClientQuotas] = DescribeClientQuotasHandler(admin)
        by_api[ApiKey.AlterClientQuotas] = AlterClientQuotasHandler(admin)
    if acl_admin is not None:
        by_api.update({ApiKey.DescribeAcls: DescribeAclsHandler(acl_admin), ApiKey.CreateAcls:
                       CreateAclsHandler(acl_admin), ApiKey.DeleteAcls: DeleteAclsHandler(acl_admin)})
    if authorization is not None:
        for api in API_NAMES:
            if api not in authorization.served:
                by_api[api] = Authorized(by_api.get(api, PASS_THROUGH), authorization)
    return Handlers(by_api)


def served_apis(admin: QuotaAdmin | None, acl_admin: AclAdmin | None) -> frozenset[int]:
    """The APIs authorization leaves alone: answered by kqp itself, or needing no authorization."""
    return UNAUTHORIZED_APIS | (ADMIN_APIS if admin is not None else frozenset()) \
        | (ACL_APIS if acl_admin is not None else frozenset())
