//! The demo's last steps: the fleet as kubectl sees it at the root, and a cluster's
//! Pods and log through the debug tunnel (`relay demo`, [`crate::cmd::demo`]).

use std::path::Path;

use hyper::Method;

use crate::client::ApiClient;
use crate::cmd::up::Hierarchy;

fn kubectl_on_path() -> bool {
    std::env::var_os("PATH")
        .map(|p| std::env::split_paths(&p).any(|d| d.join("kubectl").is_file()))
        .unwrap_or(false)
}

/// The fleet as kubectl sees it at the root, when kubectl is on the PATH.
pub(crate) fn kubectl_step(kubeconfig: &Path) -> anyhow::Result<()> {
    if !kubectl_on_path() {
        println!("\nkubectl is not on the PATH: skipped `kubectl get deploy -A` at the root");
        return Ok(());
    }
    println!(
        "\nthe fleet as kubectl sees it (kubectl --kubeconfig {} get deploy -A):",
        kubeconfig.display()
    );
    // The processes of the hierarchy run on their own; waiting here blocks nothing.
    let out = std::process::Command::new("kubectl")
        .arg("--kubeconfig")
        .arg(kubeconfig)
        .args(["get", "deploy", "-A"])
        .output()?;
    print!("{}", String::from_utf8_lossy(&out.stdout));
    if !out.status.success() {
        anyhow::bail!(
            "kubectl get deploy -A failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    Ok(())
}

/// Runs kubectl with `args`, printing the command line and what it printed.
fn kubectl(kubeconfig: &Path, args: &[&str]) -> anyhow::Result<String> {
    println!("$ kubectl {}", args.join(" "));
    let out = std::process::Command::new("kubectl")
        .arg("--kubeconfig")
        .arg(kubeconfig)
        .args(args)
        .output()?;
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    print!("{text}");
    if !out.status.success() {
        anyhow::bail!(
            "kubectl {} failed: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr)
        );
    }
    Ok(text)
}

/// The debug tunnel: the app's Pods and the last lines of one Pod's log on `cluster`
/// of `region` and `site`, three tiers below the root, with kubectl when it is on the
/// PATH, otherwise with the same requests through the root's API.
pub(crate) async fn debug_step(
    h: &Hierarchy,
    client: &ApiClient,
    [region, site, cluster]: [&str; 3],
) -> anyhow::Result<()> {
    let route = format!("{} -> {region} -> {site} -> {cluster}", h.rendered.root);
    if kubectl_on_path() {
        let kubeconfig = h.write_cluster_kubeconfig(cluster).await?;
        println!(
            "
debugging {cluster} through the tiers ({route}) with kubectl --kubeconfig {}:",
            kubeconfig.display()
        );
        let pods = kubectl(&kubeconfig, &["get", "pods", "-n", "retail"])?;
        let Some(pod) = pods
            .lines()
            .nth(1)
            .and_then(|l| l.split_whitespace().next())
        else {
            anyhow::bail!("{cluster} shows no Pod of the app");
        };
        kubectl(&kubeconfig, &["logs", "-n", "retail", pod, "--tail=3"])?;
        return Ok(());
    }
    let base = format!("/clusters/{cluster}/api/v1/namespaces/retail/pods");
    println!(
        "
debugging {cluster} through the tiers ({route}); kubectl is not on the PATH, so with the \
         requests kubectl would send, through the root's API (GET {base}...):"
    );
    let (status, pods) = client.request(Method::GET, &base, None).await?;
    if !status.is_success() {
        anyhow::bail!("GET {base}: {status}: {pods}");
    }
    let names: Vec<&str> = pods["items"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|p| p["metadata"]["name"].as_str())
        .collect();
    println!("Pods in retail: {}", names.join(", "));
    let Some(pod) = names.first() else {
        anyhow::bail!("{cluster} shows no Pod of the app");
    };
    let path = format!("{base}/{pod}/log?tailLines=3");
    let (status, log) = client.request(Method::GET, &path, None).await?;
    match log.as_str() {
        Some(text) if status.is_success() => {
            println!("the last lines of {pod}'s log:");
            print!("{text}");
            Ok(())
        }
        _ => anyhow::bail!("GET {path}: {status}: {log}"),
    }
}
