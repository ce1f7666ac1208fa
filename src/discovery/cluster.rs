//! The cluster half of the `ClusterDiscovery` status: cluster metadata (provider, region,
//! zones, Kubernetes version, each with where it came from) and node-group summaries, all
//! computed from the Node projections of [`view`](super::view). Pure: no client, no clock,
//! no I/O.
//!
//! Capacity sums are exact ([`crate::api::quantity`]), written in a canonical form.

use std::collections::{BTreeMap, BTreeSet};

use crate::api::discovery::{ClusterMetadata, NodeGroup, Sourced};
use crate::api::quantity::{self, Quantity};
use crate::discovery::view::{NodeView, SUMMED_RESOURCES, node_labels};

/// Source text of the provider: the Nodes' `spec.providerID`.
pub const PROVIDER_SOURCE: &str = "node.spec.providerID";

/// Source text of the Kubernetes version: the API server's `/version` endpoint.
pub const VERSION_SOURCE: &str = "apiserver /version";

/// Shown in a node group for a zone, instance type or runtime a Node does not report.
pub const UNKNOWN: &str = "unknown";

/// `spec.providerID` schemes (the text before `://`) and the provider each one names. Every
/// entry is the form written by the named cloud-controller-manager or tool, at the path cited.
const PROVIDER_SCHEMES: &[(&str, &str)] = &[
    // kubernetes/cloud-provider-aws, pkg/providers/v1/instances.go (KubernetesInstanceID):
    // `aws:///<zone>/<instance-id>`.
    ("aws", "aws"),
    // kubernetes-sigs/cloud-provider-azure, pkg/provider/azure_wrap.go (azureNodeProviderIDRE):
    // `azure:///subscriptions/<sub>/resourceGroups/<rg>/providers/Microsoft.Compute/…`.
    ("azure", "azure"),
    // digitalocean/digitalocean-cloud-controller-manager, cloud-controller-manager/do/droplets.go
    // (dropletIDFromProviderID): `digitalocean://<droplet-id>`.
    ("digitalocean", "digitalocean"),
    // kubernetes-sigs/cloud-provider-equinix-metal, metal/cloud.go: ProviderName `equinixmetal`,
    // and `packet`, the deprecated name it still answers to.
    ("equinixmetal", "equinixmetal"),
    ("packet", "equinixmetal"),
    // exoscale/exoscale-cloud-controller-manager, exoscale/instances.go (InstanceID):
    // `exoscale://<instance-id>`.
    ("exoscale", "exoscale"),
    // kubernetes/cloud-provider-gcp, providers/gce/gce_util.go (providerIDRE):
    // `gce://<project>/<zone>/<instance-name>`.
    ("gce", "gcp"),
    // hetznercloud/hcloud-cloud-controller-manager, internal/providerid/providerid.go:
    // `hcloud://<id>` (Cloud servers, and the legacy `hcloud://bm-<id>`) and `hrobot://<id>`
    // (Robot servers).
    ("hcloud", "hetzner"),
    ("hrobot", "hetzner"),
    // IBM-Cloud/cloud-provider-ibm, ibm/ibm_instances.go (providerIDV2):
    // `ibm://<account>///<cluster>/<worker>`.
    ("ibm", "ibm"),
    // k3s-io/k3s, pkg/cloudprovider/instances_test.go (InstanceMetadata): k3s's embedded cloud
    // provider writes `k3s://<node-name>`.
    ("k3s", "k3s"),
    // kubernetes-sigs/kind, pkg/cluster/internal/kubeadm/config.go: kubelet
    // `provider-id: kind://<node-provider>/<cluster>/<node>`.
    ("kind", "kind"),
    // kwok itself sets no providerID (its Node examples and stages leave `spec` alone); the
    // kwok provider of kubernetes-sigs/karpenter, kwok/cloudprovider, writes `kwok://<node>`.
    ("kwok", "kwok"),
    // linode/linode-cloud-controller-manager, cloud/linode/common.go (providerIDPrefix):
    // `linode://<id>`.
    ("linode", "linode"),
    // oracle/oci-cloud-controller-manager, pkg/cloudprovider/providers/oci/ccm.go
    // (providerPrefix): `oci://<instance-ocid>`.
    ("oci", "oracle"),
    // kubernetes/cloud-provider-openstack, pkg/openstack/instances.go (providerIDRegexp):
    // `openstack:///<id>` or `openstack://<region>/<id>`.
    ("openstack", "openstack"),
    // scaleway/scaleway-cloud-controller-manager, scaleway/servers.go (ServerInfoFromProviderID):
    // `scaleway://<product>/<zone>/<id>` or the older `scaleway://<id>`.
    ("scaleway", "scaleway"),
    // kubernetes/cloud-provider-vsphere, pkg/cloudprovider/vsphere/util.go (ProviderPrefix):
    // `vsphere://<vm-uuid>`.
    ("vsphere", "vsphere"),
];

/// The cloud provider a Node's `spec.providerID` names, from its documented prefix
/// (`aws://` → `aws`, `gce://` → `gcp`, `hcloud://` → `hetzner`, `oci://` → `oracle`, …).
/// `None` for an empty or unrecognised ID: only forms written by a provider's own
/// cloud-controller-manager are recognised, never guessed.
pub fn provider(provider_id: &str) -> Option<&'static str> {
    if let Some((scheme, _)) = provider_id.split_once("://") {
        return PROVIDER_SCHEMES
            .iter()
            .find(|(s, _)| s.eq_ignore_ascii_case(scheme))
            .map(|&(_, name)| name);
    }
    // oracle/oci-cloud-controller-manager, pkg/cloudprovider/providers/oci/util.go
    // (MapProviderIDToResourceID) also takes a bare instance OCID, which Oracle documents as
    // `ocid1.<resource-type>.<realm>.…`.
    if provider_id.starts_with("ocid1.") {
        return Some("oracle");
    }
    // kubernetes/cloud-provider-alibaba-cloud, docs/getting-started.md: kubelet
    // `--provider-id` is `<REGION_ID>.<ECS_ID>`, e.g. `cn-hangzhou.i-bp1…`.
    if is_alibaba_id(provider_id) {
        return Some("alibaba");
    }
    None
}

/// `<REGION_ID>.<ECS_ID>`: a dashed lower-case region (`cn-hangzhou`, `ap-southeast-1`), a
/// dot, and an ECS instance ID (`i-` and lower-case letters or digits).
fn is_alibaba_id(id: &str) -> bool {
    let lower_alnum = |s: &str| {
        !s.is_empty()
            && s.bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit())
    };
    let Some((region, instance)) = id.split_once('.') else {
        return false;
    };
    region.contains('-')
        && region.split('-').all(lower_alnum)
        && instance.strip_prefix("i-").is_some_and(lower_alnum)
}

/// Cluster metadata from the Nodes:
/// - provider: the one most Nodes' `spec.providerID` names (source [`PROVIDER_SOURCE`], with
///   `(k of n Nodes)` appended when not every Node agrees);
/// - region: the most common region label, the same way (source
///   `node label topology.kubernetes.io/region`; the projection falls back to the legacy
///   `failure-domain.beta.kubernetes.io/region` key and does not say which it read);
/// - zones: every zone with at least one Node, sorted;
/// - Kubernetes version: `kubernetes_version` when given (source [`VERSION_SOURCE`]).
///
/// Ties go to the alphabetically first value, so the result does not depend on Node order.
pub fn metadata(
    nodes: &[NodeView],
    name: Sourced,
    kubernetes_version: Option<String>,
) -> ClusterMetadata {
    let total = nodes.len();
    let cloud = majority(
        nodes
            .iter()
            .filter_map(|n| n.provider_id.as_deref().and_then(provider)),
    )
    .map(|(value, agreeing)| Sourced {
        value: value.to_string(),
        source: agreement(PROVIDER_SOURCE, agreeing, total),
    });
    let region =
        majority(nodes.iter().filter_map(|n| present(&n.region))).map(|(value, agreeing)| {
            Sourced {
                value: value.to_string(),
                source: agreement(
                    &format!("node label {}", node_labels::REGION),
                    agreeing,
                    total,
                ),
            }
        });
    let zones: BTreeSet<&str> = nodes.iter().filter_map(|n| present(&n.zone)).collect();
    ClusterMetadata {
        name: Some(name),
        provider: cloud,
        region,
        zones: zones.into_iter().map(str::to_string).collect(),
        kubernetes_version: kubernetes_version
            .filter(|v| !v.is_empty())
            .map(|value| Sourced {
                value,
                source: VERSION_SOURCE.to_string(),
            }),
    }
}

/// A label value, treating an empty one as absent.
fn present(value: &Option<String>) -> Option<&str> {
    value.as_deref().filter(|v| !v.is_empty())
}

/// The most frequent value and how many times it occurs; on a tie, the alphabetically first.
fn majority<'a>(values: impl Iterator<Item = &'a str>) -> Option<(&'a str, usize)> {
    let mut counts: BTreeMap<&str, usize> = BTreeMap::new();
    for v in values {
        *counts.entry(v).or_default() += 1;
    }
    // The map iterates alphabetically and only a strictly larger count replaces the best so
    // far, so the first of equally frequent values wins.
    counts
        .into_iter()
        .fold(None, |best, (value, count)| match best {
            Some((_, best_count)) if best_count >= count => best,
            _ => Some((value, count)),
        })
}

/// `source`, or `source (k of n Nodes)` when only some Nodes back the value.
fn agreement(source: &str, agreeing: usize, total: usize) -> String {
    if agreeing == total {
        source.to_string()
    } else {
        format!("{source} ({agreeing} of {total} Nodes)")
    }
}

/// Node groups: Nodes sharing a zone, an instance type and a container runtime (absent or
/// empty values shown as [`UNKNOWN`]), sorted by those three. Each group has its Node count,
/// Ready count, summed capacity and allocatable for cpu, memory and pods (in canonical form,
/// see [`format_quantity`]), and how many Nodes report each pressure condition.
///
/// A quantity that does not parse, or is negative, is left out of the sum; a resource no Node
/// of the group reports validly is left out of the map.
pub fn node_groups(nodes: &[NodeView]) -> Vec<NodeGroup> {
    let mut groups: BTreeMap<(String, String, String), Vec<&NodeView>> = BTreeMap::new();
    for n in nodes {
        let key = (known(&n.zone), known(&n.instance_type), known(&n.runtime));
        groups.entry(key).or_default().push(n);
    }
    groups
        .into_iter()
        .map(|((zone, instance_type, runtime), members)| NodeGroup {
            zone,
            instance_type,
            runtime,
            count: saturating_i32(members.len()),
            ready: saturating_i32(members.iter().filter(|n| n.ready).count()),
            capacity: summed(members.iter().map(|n| &n.capacity)),
            allocatable: summed(members.iter().map(|n| &n.allocatable)),
            pressure: pressure_counts(&members),
        })
        .collect()
}

fn known(value: &Option<String>) -> String {
    present(value).unwrap_or(UNKNOWN).to_string()
}

fn saturating_i32(n: usize) -> i32 {
    i32::try_from(n).unwrap_or(i32::MAX)
}

/// Per resource of [`SUMMED_RESOURCES`], the sum of the valid, non-negative quantities.
fn summed<'a>(
    lists: impl Iterator<Item = &'a BTreeMap<String, String>> + Clone,
) -> BTreeMap<String, String> {
    SUMMED_RESOURCES
        .iter()
        .filter_map(|&resource| {
            let total = lists
                .clone()
                .filter_map(|list| list.get(resource))
                .filter_map(|v| quantity::parse(v))
                // Capacity is never negative; a negative value is as broken as garbage.
                .filter(|q| q.nanos() >= 0)
                .fold(None, |acc: Option<Quantity>, q| {
                    // An overflowing addend is dropped like an invalid one.
                    Some(acc.map_or(q, |a| a.checked_add(q).unwrap_or(a)))
                })?;
            Some((resource.to_string(), quantity::format(resource, total)))
        })
        .collect()
}

fn pressure_counts(members: &[&NodeView]) -> BTreeMap<String, i32> {
    let mut counts: BTreeMap<String, i32> = BTreeMap::new();
    for n in members {
        // A condition counts once per Node, even if a projection lists it twice.
        let distinct: BTreeSet<&str> = n.pressure.iter().map(String::as_str).collect();
        for condition in distinct {
            let c = counts.entry(condition.to_string()).or_default();
            *c = c.saturating_add(1);
        }
    }
    counts
}

#[cfg(test)]
#[path = "cluster_tests.rs"]
mod tests;
