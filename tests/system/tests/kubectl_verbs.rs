//! kubectl's verbs beyond `apply` against the root (issue 45, Deliver 6): a matrix of
//! one row per verb, run with kubectl 1.33 (npm) and, where it could be had, Debian's
//! kubectl 1.20. Every row runs even when an earlier one failed: the objects a row
//! works on are made beforehand with `relay apply`, so a row fails only for its own
//! verb. Each row that places or changes an object checks through the root
//! (`relay get`) that the change is there and that the object runs on exactly the
//! clusters its placement selects. Prints `kubectl V: P/T passed` and every failure
//! with what kubectl printed; asserts that every row passed.

#![allow(clippy::unwrap_used)]
// A synchronous test driving processes: there is no runtime for a sleep to block.
#![allow(clippy::disallowed_methods)]

use crate::kube_fleet::{self, Fleet, at, failed};

use std::io::{BufRead, BufReader};
use std::process::{Child, Stdio};
use std::sync::mpsc;
use std::time::Duration;

/// One kubectl and the namespace its rows work in.
struct Ctx<'a> {
    f: &'a Fleet,
    /// The program's file name in the clients' directory.
    kubectl: &'static str,
    ns: String,
    /// The Placement that selects every object of `ns` for the `role=pos` clusters.
    placement: String,
}

type Row = (&'static str, fn(&Ctx<'_>) -> Result<(), String>);

impl Ctx<'_> {
    /// Runs kubectl; `Ok(stdout)` or `Err` with everything it printed.
    fn k(&self, args: &[&str]) -> Result<String, String> {
        self.f.try_ok(self.kubectl, args)
    }

    /// Runs kubectl in the row's namespace.
    fn kn(&self, args: &[&str]) -> Result<String, String> {
        let mut all = args.to_vec();
        all.extend(["-n", &self.ns]);
        self.k(&all)
    }

    /// A field of `kind/name` in the namespace, as the root holds it.
    fn field(&self, kind: &str, name: &str, pointer: &str) -> Result<String, String> {
        let v = self
            .f
            .object(kind, Some(&self.ns), name)
            .ok_or_else(|| format!("the root has no {kind} {}/{name}", self.ns))?;
        Ok(at(&v, pointer))
    }

    /// `Err` unless the root holds `want` at `pointer` of `kind/name`.
    fn expect(&self, kind: &str, name: &str, pointer: &str, want: &str) -> Result<(), String> {
        let got = self.field(kind, name, pointer)?;
        if got == want {
            Ok(())
        } else {
            Err(format!(
                "the root holds {kind} {}/{name} with {pointer} = {got:?}, not {want:?}",
                self.ns
            ))
        }
    }

    /// `Err` unless `kind/name` runs on exactly the `role=pos` clusters.
    fn landed(&self, kind: &str, name: &str) -> Result<(), String> {
        self.f.landed_on_pos(kind, &self.ns, name, &self.placement)
    }

    fn write(&self, name: &str, text: &str) -> String {
        self.f.write(&format!("{}-{name}", self.ns), text)
    }

    /// Starts kubectl in the background with stdout and stderr read line by line on
    /// threads: (child, stdout lines, stderr lines).
    fn spawn(&self, args: &[&str]) -> (Child, mpsc::Receiver<String>, mpsc::Receiver<String>) {
        let mut child = self
            .f
            .command(self.kubectl)
            .args(args)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let lines = |r: Box<dyn std::io::Read + Send>| {
            let (tx, rx) = mpsc::channel();
            std::thread::spawn(move || {
                for line in BufReader::new(r).lines().map_while(Result::ok) {
                    let _ = tx.send(line);
                }
            });
            rx
        };
        let out = lines(Box::new(child.stdout.take().unwrap()));
        let err = lines(Box::new(child.stderr.take().unwrap()));
        (child, out, err)
    }
}

/// Waits up to `secs` for a line of `rx` for which `want` holds; the lines seen.
fn await_line(
    rx: &mpsc::Receiver<String>,
    secs: u64,
    want: impl Fn(&str) -> bool,
) -> (bool, Vec<String>) {
    let mut seen = Vec::new();
    for _ in 0..secs * 10 {
        while let Ok(line) = rx.try_recv() {
            let hit = want(&line);
            seen.push(line);
            if hit {
                return (true, seen);
            }
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    (false, seen)
}

fn drain(rx: &mpsc::Receiver<String>) -> String {
    rx.try_iter().collect::<Vec<_>>().join("\n")
}

fn kill(mut child: Child) {
    let _ = child.kill();
    let _ = child.wait();
}

/// The objects the rows work on, made with `relay apply` (not kubectl, so that no row
/// depends on another verb), and the Placement of the whole namespace.
fn fixture(ns: &str) -> String {
    format!(
        "apiVersion: v1
kind: Namespace
metadata: {{ name: {ns} }}
---
apiVersion: apps/v1
kind: Deployment
metadata: {{ name: base, namespace: {ns}, labels: {{ app: base }} }}
spec:
  replicas: 1
  selector: {{ matchLabels: {{ app: base }} }}
  template:
    metadata: {{ labels: {{ app: base }} }}
    spec: {{ containers: [ {{ name: web, image: \"nginx:1.27\" }} ] }}
---
apiVersion: v1
kind: ConfigMap
metadata: {{ name: base, namespace: {ns} }}
data: {{ color: blue }}
---
apiVersion: v1
kind: ConfigMap
metadata: {{ name: rep, namespace: {ns} }}
data: {{ v: \"1\" }}
---
apiVersion: v1
kind: ConfigMap
metadata: {{ name: gone, namespace: {ns} }}
data: {{ v: \"1\" }}
---
apiVersion: v1
kind: ConfigMap
metadata: {{ name: watched, namespace: {ns} }}
data: {{ v: \"1\" }}
---
apiVersion: strata.dev/v1alpha1
kind: Placement
metadata: {{ name: {ns} }}
spec:
  objects: [ {{ namespaces: [{ns}] }} ]
  clusters: {{ selector: {{ matchLabels: {{ role: pos }} }} }}
"
    )
}

fn rows() -> Vec<Row> {
    vec![
        ("create namespace", |c| {
            let name = format!("{}-made", c.ns);
            c.k(&["create", "namespace", &name])?;
            c.f.object("namespace", None, &name)
                .map(|_| ())
                .ok_or_else(|| format!("the root has no namespace {name}"))
        }),
        ("create deployment", |c| {
            c.kn(&["create", "deployment", "made", "--image=nginx:1.27"])?;
            c.expect(
                "deployment",
                "made",
                "/spec/template/spec/containers/0/image",
                "nginx:1.27",
            )?;
            c.landed("deployment", "made")
        }),
        ("create configmap --from-literal", |c| {
            c.kn(&["create", "configmap", "lit", "--from-literal=a=1"])?;
            c.expect("configmap", "lit", "/data/a", "1")?;
            c.landed("configmap", "lit")
        }),
        ("create secret generic", |c| {
            c.kn(&["create", "secret", "generic", "sec", "--from-literal=p=q"])?;
            c.expect("secret", "sec", "/data/p", "cQ==")?;
            c.landed("secret", "sec")
        }),
        ("expose", |c| {
            c.kn(&["expose", "deployment", "base", "--port=80"])?;
            c.expect("service", "base", "/spec/ports/0/port", "80")?;
            c.expect("service", "base", "/spec/selector/app", "base")?;
            c.landed("service", "base")
        }),
        ("set image", |c| {
            c.kn(&["set", "image", "deployment/base", "web=nginx:1.28"])?;
            c.expect(
                "deployment",
                "base",
                "/spec/template/spec/containers/0/image",
                "nginx:1.28",
            )?;
            c.landed("deployment", "base")
        }),
        ("set env", |c| {
            c.kn(&["set", "env", "deployment/base", "MODE=fleet"])?;
            let env = "/spec/template/spec/containers/0/env/0";
            c.expect("deployment", "base", &format!("{env}/name"), "MODE")?;
            c.expect("deployment", "base", &format!("{env}/value"), "fleet")?;
            c.landed("deployment", "base")
        }),
        ("set resources", |c| {
            c.kn(&[
                "set",
                "resources",
                "deployment/base",
                "-c",
                "web",
                "--limits=cpu=200m,memory=64Mi",
            ])?;
            c.expect(
                "deployment",
                "base",
                "/spec/template/spec/containers/0/resources/limits/cpu",
                "200m",
            )?;
            c.landed("deployment", "base")
        }),
        ("scale", |c| {
            c.kn(&["scale", "deployment/base", "--replicas=3"])?;
            c.expect("deployment", "base", "/spec/replicas", "3")?;
            c.landed("deployment", "base")
        }),
        ("label", |c| {
            c.kn(&["label", "configmap", "base", "team=a"])?;
            c.expect("configmap", "base", "/metadata/labels/team", "a")?;
            c.landed("configmap", "base")
        }),
        ("annotate", |c| {
            c.kn(&["annotate", "configmap", "base", "note=x"])?;
            c.expect("configmap", "base", "/metadata/annotations/note", "x")?;
            c.landed("configmap", "base")
        }),
        ("patch --type strategic", |c| {
            // A strategic merge patch merges containers by name: the image stays.
            c.kn(&[
                "patch",
                "deployment",
                "base",
                "--type",
                "strategic",
                "-p",
                r#"{"spec":{"template":{"spec":{"containers":[{"name":"web","ports":[{"containerPort":8080}]}]}}}}"#,
            ])?;
            let web = "/spec/template/spec/containers/0";
            c.expect(
                "deployment",
                "base",
                &format!("{web}/ports/0/containerPort"),
                "8080",
            )?;
            let image = c.field("deployment", "base", &format!("{web}/image"))?;
            if !image.starts_with("nginx:") {
                return Err(format!(
                    "the strategic merge patch replaced the container: image {image:?}"
                ));
            }
            c.landed("deployment", "base")
        }),
        ("patch --type merge", |c| {
            c.kn(&[
                "patch",
                "configmap",
                "base",
                "--type",
                "merge",
                "-p",
                r#"{"data":{"merged":"yes"}}"#,
            ])?;
            c.expect("configmap", "base", "/data/merged", "yes")?;
            c.expect("configmap", "base", "/data/color", "blue")?;
            c.landed("configmap", "base")
        }),
        ("patch --type json", |c| {
            c.kn(&[
                "patch",
                "configmap",
                "base",
                "--type",
                "json",
                "-p",
                r#"[{"op":"add","path":"/data/json","value":"yes"}]"#,
            ])?;
            c.expect("configmap", "base", "/data/json", "yes")?;
            c.landed("configmap", "base")
        }),
        ("edit", |c| {
            let editor = c.write(
                "editor.sh",
                "#!/bin/sh\nsed -i 's/color: blue/color: green/' \"$1\"\n",
            );
            std::fs::set_permissions(&editor, std::os::unix::fs::PermissionsExt::from_mode(0o755))
                .unwrap();
            let args = ["edit", "configmap", "base", "-n", &c.ns];
            let out =
                c.f.command(c.kubectl)
                    .args(args)
                    .env("EDITOR", &editor)
                    .env("KUBE_EDITOR", &editor)
                    .output()
                    .unwrap();
            if !out.status.success() {
                return Err(failed(c.kubectl, &args, &out));
            }
            c.expect("configmap", "base", "/data/color", "green")?;
            c.landed("configmap", "base")
        }),
        ("replace", |c| {
            let file = c.write(
                "replace.yaml",
                &format!(
                    "apiVersion: v1\nkind: ConfigMap\nmetadata: {{ name: rep, namespace: {} }}\ndata: {{ v: \"2\" }}\n",
                    c.ns
                ),
            );
            c.k(&["replace", "-f", &file])?;
            c.expect("configmap", "rep", "/data/v", "2")?;
            c.landed("configmap", "rep")
        }),
        ("diff", |c| {
            let before = c.field("configmap", "rep", "/data/v")?;
            let file = c.write(
                "diff.yaml",
                &format!(
                    "apiVersion: v1\nkind: ConfigMap\nmetadata: {{ name: rep, namespace: {} }}\ndata: {{ v: \"differs\" }}\n",
                    c.ns
                ),
            );
            // Exit status 1: differences found (0: none, above 1: an error).
            let args = ["diff", "-f", &file];
            let out = c.f.run(c.kubectl, &args);
            let stdout = String::from_utf8_lossy(&out.stdout);
            if out.status.code() != Some(1) || !stdout.contains("differs") {
                return Err(format!(
                    "wanted exit status 1 and a diff naming the new value; {}",
                    failed(c.kubectl, &args, &out)
                ));
            }
            c.expect("configmap", "rep", "/data/v", &before)
        }),
        ("apply --dry-run=server", |c| {
            let file = c.write(
                "dry-server.yaml",
                &format!(
                    "apiVersion: v1\nkind: ConfigMap\nmetadata: {{ name: dry-server, namespace: {} }}\ndata: {{ a: b }}\n",
                    c.ns
                ),
            );
            let out = c.k(&["apply", "--dry-run=server", "-f", &file])?;
            if !out.contains("configmap/dry-server created (server dry run)") {
                return Err(format!("kubectl printed {out:?}"));
            }
            match c.f.object("configmap", Some(&c.ns), "dry-server") {
                Some(_) => Err("a server dry run stored the object at the root".into()),
                None => Ok(()),
            }
        }),
        ("apply --dry-run=client", |c| {
            let file = c.write(
                "dry-client.yaml",
                &format!(
                    "apiVersion: v1\nkind: ConfigMap\nmetadata: {{ name: dry-client, namespace: {} }}\ndata: {{ a: b }}\n",
                    c.ns
                ),
            );
            let out = c.k(&["apply", "--dry-run=client", "-f", &file])?;
            if !out.contains("configmap/dry-client created (dry run)") {
                return Err(format!("kubectl printed {out:?}"));
            }
            match c.f.object("configmap", Some(&c.ns), "dry-client") {
                Some(_) => Err("a client dry run stored the object at the root".into()),
                None => Ok(()),
            }
        }),
        ("wait --for=delete", |c| {
            // kubectl must see the object before it is deleted: its requests are
            // logged (-v=6), and the delete follows its first one for the object.
            let (child, out, err) = c.spawn(&[
                "wait",
                "--for=delete",
                "configmap/gone",
                "-n",
                &c.ns,
                "--timeout=90s",
                "-v=6",
            ]);
            let (asked, _) = await_line(&err, 30, |l| l.contains("/configmaps"));
            if !asked {
                kill(child);
                return Err(format!(
                    "kubectl wait sent no request for the ConfigMap: {}",
                    drain(&err)
                ));
            }
            c.f.try_ok("relay", &["delete", "configmap", "gone", "-n", &c.ns])?;
            let mut child = child;
            let mut status = None;
            for _ in 0..1200 {
                if let Some(s) = child.try_wait().unwrap() {
                    status = Some(s);
                    break;
                }
                std::thread::sleep(Duration::from_millis(100));
            }
            let Some(status) = status else {
                kill(child);
                return Err(format!(
                    "kubectl wait --for=delete did not end after the delete: {}",
                    drain(&err)
                ));
            };
            if !status.success() {
                return Err(format!(
                    "kubectl wait --for=delete ({status}): {}\n{}",
                    drain(&out),
                    drain(&err)
                ));
            }
            match c.f.object("configmap", Some(&c.ns), "gone") {
                Some(_) => Err("the root still has configmap gone".into()),
                None => Ok(()),
            }
        }),
        ("get -w", |c| {
            let (child, out, err) = c.spawn(&[
                "get",
                "configmap",
                "watched",
                "-n",
                &c.ns,
                "-w",
                "-o",
                "jsonpath={.data.v}{\"\\n\"}",
            ]);
            let (first, seen) = await_line(&out, 30, |l| l.trim() == "1");
            if !first {
                kill(child);
                return Err(format!(
                    "kubectl get -w printed {seen:?}, not the current value 1: {}",
                    drain(&err)
                ));
            }
            let file = c.write(
                "watched.yaml",
                &format!(
                    "apiVersion: v1\nkind: ConfigMap\nmetadata: {{ name: watched, namespace: {} }}\ndata: {{ v: \"2\" }}\n",
                    c.ns
                ),
            );
            c.f.try_ok("relay", &["apply", "-f", &file])?;
            let (second, more) = await_line(&out, 30, |l| l.trim() == "2");
            kill(child);
            if second {
                Ok(())
            } else {
                Err(format!(
                    "kubectl get -w printed {seen:?} then {more:?}, never the change to 2: {}",
                    drain(&err)
                ))
            }
        }),
        ("explain", |c| {
            let out = c.k(&["explain", "deployment.spec.replicas"])?;
            if out.contains("Number of desired pods") {
                Ok(())
            } else {
                Err(format!("kubectl explain printed {out:?}"))
            }
        }),
        ("auth can-i", |c| {
            let out = c.kn(&["auth", "can-i", "create", "deployments"])?;
            if out.trim() == "yes" {
                Ok(())
            } else {
                Err(format!("kubectl auth can-i printed {out:?}"))
            }
        }),
        ("get -o yaml > f; apply -f f", |c| {
            let yaml = c.kn(&["get", "deployment", "base", "-o", "yaml"])?;
            let file = c.write("roundtrip.yaml", &yaml);
            c.k(&["apply", "-f", &file])?;
            c.landed("deployment", "base")
        }),
    ]
}

#[test]
fn kubectl_verbs_work_against_the_root() {
    let tmp = tempfile::tempdir().unwrap();
    let f = kube_fleet::up(tmp.path());
    let mut versions = vec![("1.33", "kubectl")];
    if f.clients().join("kubectl-1.20").exists() {
        versions.push(("1.20", "kubectl-1.20"));
    } else {
        let why = std::fs::read_to_string(f.clients().join("kubectl-1.20.missing"))
            .unwrap_or_else(|_| "not installed".into());
        eprintln!(
            "kubectl 1.20: not run, it could not be installed ({})",
            why.trim()
        );
    }
    let mut report = Vec::new();
    let mut all_passed = true;
    for (version, kubectl) in versions {
        let client = f.ok(kubectl, &["version", "--client"]);
        assert!(client.contains(&format!("v{version}.")), "{client}");
        let ns = format!("verbs-{}", version.replace('.', ""));
        let fixture = f.write(&format!("{ns}.yaml"), &fixture(&ns));
        f.ok("relay", &["apply", "-f", &fixture]);
        let c = Ctx {
            f: &f,
            kubectl,
            placement: ns.clone(),
            ns,
        };
        c.landed("deployment", "base").unwrap();
        let rows = rows();
        let mut failures = Vec::new();
        for (name, row) in &rows {
            let result = row(&c);
            eprintln!(
                "kubectl {version} {name}: {}",
                if result.is_ok() { "passed" } else { "FAILED" }
            );
            if let Err(e) = result {
                failures.push(format!("{name}: {e}"));
            }
        }
        let line = format!(
            "kubectl {version}: {}/{} passed",
            rows.len() - failures.len(),
            rows.len()
        );
        all_passed &= failures.is_empty();
        report.push(line);
        for e in failures {
            report.push(format!("  FAILED {}", e.trim_end().replace('\n', "\n    ")));
        }
    }
    let report = report.join("\n");
    eprintln!("{report}");
    assert!(all_passed, "{report}");
}
