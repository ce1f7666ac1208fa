//! The GitHub Actions workflows cannot run here, so they are linted (actionlint built from its
//! Go module, `e2e/actionlint`, with shellcheck on their scripts) and held to what they must
//! do: CI runs the README's test command, and a release builds the image from the same
//! Dockerfile and binary layout as `e2e/image build`, for amd64 and arm64, pushes it and the
//! chart to ghcr.io, and signs them.

mod common;

use std::process::Command;

fn read(rel: &str) -> String {
    std::fs::read_to_string(common::root().join(rel)).unwrap_or_else(|e| panic!("{rel}: {e}"))
}

fn actionlint(args: &[&str]) -> std::process::Output {
    Command::new(common::root().join("e2e/actionlint"))
        .args(args)
        .current_dir(common::root())
        .output()
        .expect("e2e/actionlint runs")
}

#[test]
fn the_workflows_pass_actionlint() {
    let out = actionlint(&[]);
    assert!(
        out.status.success(),
        "actionlint:\n{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn actionlint_finds_a_broken_workflow() {
    // The lint above means something only if actionlint reports what is wrong.
    let file = std::env::temp_dir().join(format!("moonin-broken-{}.yaml", std::process::id()));
    std::fs::write(
        &file,
        "on: push\njobs:\n  x:\n    runs-on: ubuntu-24.04\n    steps:\n      - run: echo ${{ matrix.nope }}\n",
    )
    .expect("write");
    let out = actionlint(&["-no-color", file.to_str().expect("path")]);
    let _ = std::fs::remove_file(&file);
    assert!(!out.status.success());
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("matrix"), "{text}");
}

#[test]
fn ci_runs_the_readme_test_command() {
    let ci = read(".github/workflows/ci.yaml");
    assert!(ci.contains("run: .ci/run"), "{ci}");
    assert!(read(".ci/run").contains("exec e2e/test"));
    assert!(read("README.md").contains("e2e/test    # run the whole test suite"));
}

#[test]
fn a_release_builds_the_image_as_e2e_image_does() {
    let release = read(".github/workflows/release.yaml");
    let image = read("e2e/image");
    let dockerfile = read("Dockerfile");
    // One Dockerfile, one binary layout: dist/<arch>/moonin from cargo's `image` profile.
    assert!(
        release.contains("file: ./Dockerfile"),
        "the release builds the Dockerfile"
    );
    assert!(dockerfile.contains("COPY dist/${TARGETARCH}/moonin /moonin"));
    assert!(image.contains("\"$ROOT/dist/$ARCH/moonin\""));
    assert!(image.contains("--profile image"));
    assert!(release.contains("--profile image"));
    assert!(release.contains("\"dist/${{ matrix.arch }}/moonin\""));
    assert!(release.contains("\"dist/$arch/moonin\""));
    assert!(release.contains("platforms: linux/amd64,linux/arm64"));
    for target in ["x86_64-unknown-linux-musl", "aarch64-unknown-linux-musl"] {
        assert!(release.contains(target), "{target}");
    }
    // Pushed to ghcr.io with an SBOM, the chart as an OCI artifact, all signed keylessly.
    assert!(release.contains("REGISTRY: ghcr.io"));
    assert!(release.contains("push: true"));
    assert!(release.contains("format: spdx-json"));
    assert!(release.contains("cosign attest --yes --type spdxjson"));
    assert!(
        release
            .contains("helm push \"dist/moonin-$VERSION.tgz\" \"oci://$REGISTRY/$owner/charts\"")
    );
    assert_eq!(
        release.matches("cosign sign --yes").count(),
        2,
        "image and chart"
    );
    assert!(release.contains("id-token: write"));
    // The Dockerfile's image: nothing but the binary, not root.
    assert!(dockerfile.contains("FROM scratch"));
    assert!(dockerfile.contains("USER 65532:65532"));
    assert_eq!(
        dockerfile.matches("\nFROM ").count() + usize::from(dockerfile.starts_with("FROM ")),
        1
    );
    assert!(
        !dockerfile.contains("\nRUN "),
        "no shell to run anything in"
    );
}
