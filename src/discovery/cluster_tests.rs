use super::*;
use crate::discovery::view;
use k8s_openapi::api::core::v1::Node;

fn with_provider(provider_id: Option<&str>) -> NodeView {
    NodeView {
        provider_id: provider_id.map(str::to_string),
        ..NodeView::default()
    }
}

fn resources(cpu: &str, memory: &str, pods: &str) -> BTreeMap<String, String> {
    [("cpu", cpu), ("memory", memory), ("pods", pods)]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

fn strings(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

fn sourced(value: &str, source: &str) -> Sourced {
    Sourced {
        value: value.to_string(),
        source: source.to_string(),
    }
}

fn flag_name() -> Sourced {
    sourced("prod-eu", "flag")
}

#[test]
fn provider_maps_documented_prefixes() {
    let cases = [
        ("aws:///us-east-1a/i-0abc123def4567890", "aws"),
        ("aws:////i-0abc123def4567890", "aws"),
        ("gce://my-project/europe-west1-b/gke-pool-1-abcd", "gcp"),
        (
            "azure:///subscriptions/0000/resourceGroups/rg/providers/Microsoft.Compute/virtualMachines/vm-0",
            "azure",
        ),
        ("digitalocean://123456789", "digitalocean"),
        (
            "openstack:///3c4bf5d4-7d7b-4c8e-9f55-1c1e2f3a4b5c",
            "openstack",
        ),
        ("openstack://RegionOne/3c4bf5d4-7d7b-4c8e", "openstack"),
        ("hcloud://12345678", "hetzner"),
        ("hcloud://bm-2345", "hetzner"),
        ("hrobot://2345", "hetzner"),
        ("linode://4242", "linode"),
        ("oci://ocid1.instance.oc1.eu-frankfurt-1.abcdef", "oracle"),
        ("ocid1.instance.oc1.eu-frankfurt-1.abcdef", "oracle"),
        ("ibm://acct123///cluster456/kube-worker-1", "ibm"),
        ("vsphere://4201794a-f26b-8914-d95a-edeb7ecc4a8f", "vsphere"),
        ("kind://docker/kind/kind-control-plane", "kind"),
        ("kwok://kwok-node-0", "kwok"),
        (
            "equinixmetal://4232e3c7-d83c-d72b-758c-71d07a3d9310",
            "equinixmetal",
        ),
        (
            "packet://4232e3c7-d83c-d72b-758c-71d07a3d9310",
            "equinixmetal",
        ),
        (
            "scaleway://instance/fr-par-1/11111111-1111-1111-1111-111111111111",
            "scaleway",
        ),
        (
            "scaleway://11111111-1111-1111-1111-111111111111",
            "scaleway",
        ),
        (
            "exoscale://123e4567-e89b-12d3-a456-426614174000",
            "exoscale",
        ),
        ("k3s://server-0", "k3s"),
        ("cn-hangzhou.i-bp1abcdefghijklmnop", "alibaba"),
        ("ap-southeast-1.i-t4n0123456789abcdef", "alibaba"),
        ("AWS:///us-east-1a/i-0abc", "aws"),
    ];
    let got: Vec<(&str, Option<&str>)> = cases.iter().map(|(id, _)| (*id, provider(id))).collect();
    let want: Vec<(&str, Option<&str>)> = cases.iter().map(|(id, p)| (*id, Some(*p))).collect();
    assert_eq!(got, want);
}

#[test]
fn provider_rejects_unknown_and_empty() {
    let ids = [
        "",
        "   ",
        "i-0abc123def4567890",
        "example://node-1",
        "fake:///node-1",
        "aws",
        "gce:/project/zone/name",
        "node-1.example.com",
        "cn-hangzhou.node-1",
        "hangzhou.i-bp1abc",
        "cn-hangzhou.i-",
        "ocid2.instance",
    ];
    let got: Vec<Option<&str>> = ids.iter().map(|id| provider(id)).collect();
    assert_eq!(got, vec![None; ids.len()]);
}

#[test]
fn metadata_when_all_nodes_agree() {
    let node = |zone: &str| NodeView {
        provider_id: Some(format!("aws:///{zone}/i-0abc")),
        region: Some("us-east-1".into()),
        zone: Some(zone.into()),
        ..NodeView::default()
    };
    let nodes = [node("us-east-1b"), node("us-east-1a"), node("us-east-1b")];
    assert_eq!(
        metadata(&nodes, flag_name(), Some("v1.31.2".into())),
        ClusterMetadata {
            name: Some(flag_name()),
            provider: Some(sourced("aws", "node.spec.providerID")),
            region: Some(sourced(
                "us-east-1",
                "node label topology.kubernetes.io/region"
            )),
            zones: vec!["us-east-1a".into(), "us-east-1b".into()],
            kubernetes_version: Some(sourced("v1.31.2", "apiserver /version")),
        }
    );
}

#[test]
fn metadata_reports_disagreement() {
    let node = |id: Option<&str>, region: Option<&str>| NodeView {
        region: region.map(str::to_string),
        ..with_provider(id)
    };
    let nodes = [
        node(Some("aws:///eu-west-1a/i-1"), Some("eu-west-1")),
        node(Some("kind://docker/kind/kind-worker"), Some("eu-west-1")),
        node(Some("aws:///eu-west-1b/i-2"), Some("eu-west-2")),
        node(None, None),
        node(Some("aws:///eu-west-1c/i-3"), Some("eu-west-1")),
    ];
    assert_eq!(
        metadata(&nodes, flag_name(), None),
        ClusterMetadata {
            name: Some(flag_name()),
            provider: Some(sourced("aws", "node.spec.providerID (3 of 5 Nodes)")),
            region: Some(sourced(
                "eu-west-1",
                "node label topology.kubernetes.io/region (3 of 5 Nodes)"
            )),
            zones: vec![],
            kubernetes_version: None,
        }
    );
}

#[test]
fn metadata_breaks_ties_alphabetically_whatever_the_order() {
    let node = |id: &str, region: &str| NodeView {
        region: Some(region.into()),
        ..with_provider(Some(id))
    };
    let mut nodes = vec![
        node("gce://p/us-central1-a/n1", "us-central1"),
        node("gce://p/us-central1-a/n2", "us-central1"),
        node("aws:///eu-west-1a/i-1", "eu-west-1"),
        node("aws:///eu-west-1a/i-2", "eu-west-1"),
    ];
    let want = ClusterMetadata {
        name: Some(flag_name()),
        provider: Some(sourced("aws", "node.spec.providerID (2 of 4 Nodes)")),
        region: Some(sourced(
            "eu-west-1",
            "node label topology.kubernetes.io/region (2 of 4 Nodes)",
        )),
        zones: vec![],
        kubernetes_version: None,
    };
    assert_eq!(metadata(&nodes, flag_name(), None), want);
    nodes.reverse();
    assert_eq!(metadata(&nodes, flag_name(), None), want);
}

#[test]
fn metadata_without_nodes_or_version() {
    assert_eq!(
        metadata(&[], flag_name(), Some(String::new())),
        ClusterMetadata {
            name: Some(flag_name()),
            ..ClusterMetadata::default()
        }
    );
}

#[test]
fn metadata_from_legacy_only_labels() {
    // A NodeView as the projection fills it from legacy keys alone.
    let built = NodeView {
        provider_id: Some("openstack:///3c4bf5d4".into()),
        region: Some("RegionOne".into()),
        zone: Some("nova".into()),
        instance_type: Some("m1.large".into()),
        ..NodeView::default()
    };
    // And the same Node through the real projection.
    let node: Node = serde_json::from_value(serde_json::json!({
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": "legacy-0",
            "labels": {
                "failure-domain.beta.kubernetes.io/region": "RegionOne",
                "failure-domain.beta.kubernetes.io/zone": "nova",
                "beta.kubernetes.io/instance-type": "m1.large"
            }
        },
        "spec": {"providerID": "openstack:///3c4bf5d4"}
    }))
    .unwrap();
    let projected = view::node(&node);
    let want = ClusterMetadata {
        name: Some(flag_name()),
        provider: Some(sourced("openstack", "node.spec.providerID")),
        region: Some(sourced(
            "RegionOne",
            "node label topology.kubernetes.io/region",
        )),
        zones: vec!["nova".into()],
        kubernetes_version: None,
    };
    assert_eq!(metadata(&[built], flag_name(), None), want);
    assert_eq!(
        metadata(std::slice::from_ref(&projected), flag_name(), None),
        want
    );
    assert_eq!(
        node_groups(&[projected]),
        vec![NodeGroup {
            zone: "nova".into(),
            instance_type: "m1.large".into(),
            runtime: "unknown".into(),
            count: 1,
            ..NodeGroup::default()
        }]
    );
}

// A table (or a generator) reads best whole.
#[allow(clippy::too_many_lines)]
#[test]
fn node_groups_split_by_zone_instance_type_and_runtime() {
    let node =
        |zone: Option<&str>, it: Option<&str>, rt: Option<&str>, ready: bool, pressure: &[&str]| {
            NodeView {
                zone: zone.map(str::to_string),
                instance_type: it.map(str::to_string),
                runtime: rt.map(str::to_string),
                ready,
                pressure: pressure.iter().map(|p| p.to_string()).collect(),
                capacity: resources("4", "16Gi", "110"),
                allocatable: resources("3800m", "15Gi", "110"),
                ..NodeView::default()
            }
        };
    let containerd = Some("containerd://1.7.2");
    let nodes = [
        node(Some("eu-west-1b"), Some("m5.large"), containerd, true, &[]),
        node(
            Some("eu-west-1a"),
            Some("m5.large"),
            containerd,
            true,
            &["DiskPressure"],
        ),
        node(
            Some("eu-west-1a"),
            Some("m5.large"),
            Some("cri-o://1.30.0"),
            false,
            &[],
        ),
        node(
            Some("eu-west-1a"),
            Some("c6g.xlarge"),
            containerd,
            true,
            &[],
        ),
        node(
            Some("eu-west-1a"),
            Some("m5.large"),
            containerd,
            false,
            &["MemoryPressure", "DiskPressure", "DiskPressure"],
        ),
        node(None, Some(""), None, true, &["PIDPressure"]),
    ];
    let group = |zone: &str,
                 it: &str,
                 rt: &str,
                 count: i32,
                 ready: i32,
                 capacity,
                 allocatable,
                 pressure: &[(&str, i32)]| NodeGroup {
        zone: zone.into(),
        instance_type: it.into(),
        runtime: rt.into(),
        count,
        ready,
        capacity,
        allocatable,
        pressure: pressure.iter().map(|(p, c)| (p.to_string(), *c)).collect(),
    };
    let one = || {
        (
            resources("4", "16Gi", "110"),
            resources("3800m", "15Gi", "110"),
        )
    };
    let (c1, a1) = one();
    let (c2, a2) = one();
    let (c3, a3) = one();
    let (c4, a4) = one();
    assert_eq!(
        node_groups(&nodes),
        vec![
            group(
                "eu-west-1a",
                "c6g.xlarge",
                "containerd://1.7.2",
                1,
                1,
                c1,
                a1,
                &[]
            ),
            group(
                "eu-west-1a",
                "m5.large",
                "containerd://1.7.2",
                2,
                1,
                resources("8", "32Gi", "220"),
                resources("7600m", "30Gi", "220"),
                &[("DiskPressure", 2), ("MemoryPressure", 1)],
            ),
            group(
                "eu-west-1a",
                "m5.large",
                "cri-o://1.30.0",
                1,
                0,
                c2,
                a2,
                &[]
            ),
            group(
                "eu-west-1b",
                "m5.large",
                "containerd://1.7.2",
                1,
                1,
                c3,
                a3,
                &[]
            ),
            group(
                "unknown",
                "unknown",
                "unknown",
                1,
                1,
                c4,
                a4,
                &[("PIDPressure", 1)]
            ),
        ]
    );
}

#[test]
fn node_groups_skip_invalid_quantities() {
    let node = |capacity: BTreeMap<String, String>| NodeView {
        zone: Some("z".into()),
        capacity,
        ..NodeView::default()
    };
    let nodes = [
        node(resources("100m", "16Gi", "110")),
        node(resources("1.5", "0.5Gi", "lots")),
        node(resources("garbage", "-1Gi", "-3")),
        node(strings(&[("cpu", "2"), ("memory", " 1Gi")])),
        node(strings(&[("cpu", "3800m"), ("memory", "1e400")])),
    ];
    assert_eq!(
        node_groups(&nodes),
        vec![NodeGroup {
            zone: "z".into(),
            instance_type: "unknown".into(),
            runtime: "unknown".into(),
            count: 5,
            capacity: resources("7400m", "16896Mi", "110"),
            ..NodeGroup::default()
        }]
    );
    // A resource no Node reports validly is absent, not zero.
    let broken = [node(strings(&[("cpu", "x"), ("pods", "1.5.2")]))];
    assert_eq!(node_groups(&broken)[0].capacity, BTreeMap::new());
}

#[test]
fn node_groups_of_nothing() {
    assert_eq!(node_groups(&[]), vec![]);
}

fn eks_node(name: &str, ready: &str, disk_pressure: &str) -> Node {
    serde_json::from_value(serde_json::json!({
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": name,
            "labels": {
                "kubernetes.io/hostname": name,
                "topology.kubernetes.io/region": "us-east-1",
                "topology.kubernetes.io/zone": "us-east-1a",
                "node.kubernetes.io/instance-type": "m5.xlarge",
                "failure-domain.beta.kubernetes.io/zone": "us-east-1a",
                "beta.kubernetes.io/instance-type": "m5.xlarge"
            }
        },
        "spec": {"providerID": format!("aws:///us-east-1a/i-{name}")},
        "status": {
            "capacity": {
                "cpu": "4",
                "memory": "16073416Ki",
                "pods": "58",
                "ephemeral-storage": "83873772Ki",
                "hugepages-2Mi": "0",
                "attachable-volumes-aws-ebs": "25"
            },
            "allocatable": {
                "cpu": "3920m",
                "memory": "15056584Ki",
                "pods": "58",
                "ephemeral-storage": "76224326324"
            },
            "conditions": [
                {"type": "MemoryPressure", "status": "False", "reason": "KubeletHasSufficientMemory"},
                {"type": "DiskPressure", "status": disk_pressure, "reason": "KubeletHasDiskPressure"},
                {"type": "PIDPressure", "status": "False", "reason": "KubeletHasSufficientPID"},
                {"type": "Ready", "status": ready, "reason": "KubeletReady"}
            ],
            "nodeInfo": {
                "architecture": "amd64",
                "bootID": "5c1b6c0e",
                "containerRuntimeVersion": "containerd://1.7.11",
                "kernelVersion": "5.10.205-195.807.amzn2.x86_64",
                "kubeProxyVersion": "v1.29.0-eks-5e0fdde",
                "kubeletVersion": "v1.29.0-eks-5e0fdde",
                "machineID": "ec2a",
                "operatingSystem": "linux",
                "osImage": "Amazon Linux 2",
                "systemUUID": "ec2a"
            }
        }
    }))
    .unwrap()
}

#[test]
fn node_groups_from_real_node_json() {
    let nodes: Vec<NodeView> = [
        eks_node("ip-10-0-1-23", "True", "True"),
        eks_node("ip-10-0-1-24", "False", "False"),
    ]
    .iter()
    .map(view::node)
    .collect();
    assert_eq!(
        node_groups(&nodes),
        vec![NodeGroup {
            zone: "us-east-1a".into(),
            instance_type: "m5.xlarge".into(),
            runtime: "containerd://1.7.11".into(),
            count: 2,
            ready: 1,
            capacity: resources("8", "32146832Ki", "116"),
            allocatable: resources("7840m", "30113168Ki", "116"),
            pressure: [("DiskPressure".to_string(), 1)].into_iter().collect(),
        }]
    );
    assert_eq!(
        metadata(&nodes, flag_name(), Some("v1.29.0-eks-5e0fdde".into())),
        ClusterMetadata {
            name: Some(flag_name()),
            provider: Some(sourced("aws", "node.spec.providerID")),
            region: Some(sourced(
                "us-east-1",
                "node label topology.kubernetes.io/region"
            )),
            zones: vec!["us-east-1a".into()],
            kubernetes_version: Some(sourced("v1.29.0-eks-5e0fdde", "apiserver /version")),
        }
    );
}
