//! Health rules on status documents shaped like the Kubernetes API reference's.

use serde_json::json;
use strata_protocol::model::Health;

use super::assess;

#[test]
fn a_rolled_out_deployment_is_available_and_reports_its_generation() {
    let d = json!({
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": "web", "namespace": "pos", "generation": 3},
        "spec": {"replicas": 3},
        "status": {
            "observedGeneration": 3, "replicas": 3, "updatedReplicas": 3,
            "readyReplicas": 3, "availableReplicas": 3,
            "conditions": [
                {"type": "Available", "status": "True", "reason": "MinimumReplicasAvailable",
                 "message": "Deployment has minimum availability.",
                 "lastTransitionTime": "2026-11-22T10:00:00Z", "lastUpdateTime": "2026-11-22T10:00:00Z"},
                {"type": "Progressing", "status": "True", "reason": "NewReplicaSetAvailable",
                 "message": "ReplicaSet \"web-5d4b\" has successfully progressed.",
                 "lastTransitionTime": "2026-11-22T09:59:00Z", "lastUpdateTime": "2026-11-22T10:00:00Z"}
            ]
        }
    });
    let a = assess("Deployment", &d);
    assert_eq!(a.health, Health::Available);
    assert_eq!(a.observed_generation, Some(3));
    assert_eq!(a.numbers["readyReplicas"], 3);
}

#[test]
fn a_deployment_whose_status_is_stale_is_progressing() {
    let d = json!({
        "metadata": {"generation": 4}, "spec": {"replicas": 3},
        "status": {"observedGeneration": 3, "replicas": 3, "updatedReplicas": 3,
                   "readyReplicas": 3, "availableReplicas": 3}
    });
    let a = assess("Deployment", &d);
    assert_eq!(a.health, Health::Progressing);
    assert!(a.message.unwrap().contains("generation 4"));
}

#[test]
fn a_deployment_past_its_deadline_failed_and_one_short_of_replicas_is_degraded() {
    let failed = json!({
        "metadata": {"generation": 2}, "spec": {"replicas": 2},
        "status": {"observedGeneration": 2, "replicas": 2, "updatedReplicas": 1,
                   "unavailableReplicas": 1, "availableReplicas": 1,
                   "conditions": [{"type": "Progressing", "status": "False",
                                   "reason": "ProgressDeadlineExceeded",
                                   "message": "ReplicaSet \"web-7c9\" has timed out progressing."}]}
    });
    let a = assess("Deployment", &failed);
    assert_eq!(a.health, Health::Failed);
    assert!(a.message.unwrap().starts_with("ProgressDeadlineExceeded"));
    let short = json!({
        "metadata": {"generation": 2}, "spec": {"replicas": 3},
        "status": {"observedGeneration": 2, "replicas": 3, "updatedReplicas": 3,
                   "availableReplicas": 2, "readyReplicas": 2, "unavailableReplicas": 1,
                   "conditions": [{"type": "Available", "status": "False",
                                   "reason": "MinimumReplicasUnavailable"}]}
    });
    assert_eq!(assess("Deployment", &short).health, Health::Degraded);
}

#[test]
fn statefulset_daemonset_and_replicaset() {
    let sts = json!({
        "metadata": {"generation": 1}, "spec": {"replicas": 3},
        "status": {"observedGeneration": 1, "replicas": 3, "readyReplicas": 2,
                   "currentReplicas": 3, "updatedReplicas": 3, "availableReplicas": 2,
                   "currentRevision": "db-6b7d", "updateRevision": "db-6b7d", "collisionCount": 0}
    });
    assert_eq!(assess("StatefulSet", &sts).health, Health::Progressing);
    let mut ready = sts.clone();
    ready["status"]["readyReplicas"] = json!(3);
    assert_eq!(assess("StatefulSet", &ready).health, Health::Available);
    let rolling = json!({
        "metadata": {"generation": 2}, "spec": {"replicas": 3},
        "status": {"observedGeneration": 2, "replicas": 3, "readyReplicas": 3,
                   "updatedReplicas": 3, "currentRevision": "db-6b7d", "updateRevision": "db-8f1a"}
    });
    assert_eq!(assess("StatefulSet", &rolling).health, Health::Progressing);

    let ds = json!({
        "metadata": {"generation": 5},
        "status": {"observedGeneration": 5, "currentNumberScheduled": 4, "desiredNumberScheduled": 4,
                   "numberMisscheduled": 0, "numberReady": 4, "updatedNumberScheduled": 4,
                   "numberAvailable": 4}
    });
    let a = assess("DaemonSet", &ds);
    assert_eq!(a.health, Health::Available);
    assert_eq!(a.numbers["numberReady"], 4);
    let mut partial = ds.clone();
    partial["status"]["numberAvailable"] = json!(3);
    assert_eq!(assess("DaemonSet", &partial).health, Health::Progressing);

    let rs = json!({
        "metadata": {"generation": 1}, "spec": {"replicas": 2},
        "status": {"observedGeneration": 1, "replicas": 2, "fullyLabeledReplicas": 2,
                   "readyReplicas": 0, "availableReplicas": 0,
                   "conditions": [{"type": "ReplicaFailure", "status": "True", "reason": "FailedCreate",
                                   "message": "pods \"web-\" is forbidden: exceeded quota"}]}
    });
    let a = assess("ReplicaSet", &rs);
    assert_eq!(a.health, Health::Degraded);
    assert!(a.message.unwrap().contains("exceeded quota"));
}

#[test]
fn jobs_complete_or_fail() {
    let complete = json!({
        "metadata": {"generation": 1},
        "status": {"startTime": "2026-11-22T10:00:00Z", "completionTime": "2026-11-22T10:01:00Z",
                   "succeeded": 1, "ready": 0,
                   "conditions": [{"type": "SuccessCriteriaMet", "status": "True"},
                                  {"type": "Complete", "status": "True"}]}
    });
    assert_eq!(assess("Job", &complete).health, Health::Available);
    let failed = json!({
        "status": {"failed": 7, "conditions": [{"type": "Failed", "status": "True",
            "reason": "BackoffLimitExceeded", "message": "Job has reached the specified backoff limit"}]}
    });
    let a = assess("Job", &failed);
    assert_eq!(a.health, Health::Failed);
    assert_eq!(
        a.message.as_deref(),
        Some("BackoffLimitExceeded: Job has reached the specified backoff limit")
    );
    let running = json!({"status": {"active": 1, "ready": 1, "startTime": "2026-11-22T10:00:00Z"}});
    assert_eq!(assess("Job", &running).health, Health::Progressing);
}

#[test]
fn pods_in_crash_loop_running_and_failed() {
    let crash = json!({
        "status": {"phase": "Running",
            "conditions": [{"type": "Ready", "status": "False", "reason": "ContainersNotReady"}],
            "containerStatuses": [{"name": "web", "ready": false, "restartCount": 5,
                "image": "web:1", "imageID": "", "started": false,
                "state": {"waiting": {"reason": "CrashLoopBackOff",
                    "message": "back-off 2m40s restarting failed container=web"}},
                "lastState": {"terminated": {"exitCode": 1, "reason": "Error",
                    "finishedAt": "2026-11-22T10:04:00Z"}}}]}
    });
    let a = assess("Pod", &crash);
    assert_eq!(a.health, Health::Degraded);
    assert_eq!(
        a.message.as_deref(),
        Some("container web: CrashLoopBackOff")
    );
    let running = json!({"status": {"phase": "Running",
        "conditions": [{"type": "Ready", "status": "True"}],
        "containerStatuses": [{"name": "web", "ready": true, "restartCount": 0,
                               "state": {"running": {"startedAt": "2026-11-22T10:00:00Z"}}}]}});
    assert_eq!(assess("Pod", &running).health, Health::Available);
    let evicted = json!({"status": {"phase": "Failed", "reason": "Evicted",
        "message": "The node was low on resource: memory."}});
    let a = assess("Pod", &evicted);
    assert_eq!(
        (a.health, a.message.as_deref()),
        (Health::Failed, Some("Evicted"))
    );
}

#[test]
fn services_pvcs_crds_namespaces() {
    let pending_lb = json!({"spec": {"type": "LoadBalancer", "ports": [{"port": 80}]},
                            "status": {"loadBalancer": {}}});
    assert_eq!(assess("Service", &pending_lb).health, Health::Progressing);
    let lb = json!({"spec": {"type": "LoadBalancer"},
                    "status": {"loadBalancer": {"ingress": [{"ip": "192.0.2.10", "ipMode": "VIP"}]}}});
    assert_eq!(assess("Service", &lb).health, Health::Available);
    let cluster_ip = json!({"spec": {"type": "ClusterIP", "clusterIP": "10.0.0.12"}, "status": {"loadBalancer": {}}});
    assert_eq!(assess("Service", &cluster_ip).health, Health::Available);

    let bound = json!({"status": {"phase": "Bound", "accessModes": ["ReadWriteOnce"],
                                  "capacity": {"storage": "10Gi"}}});
    assert_eq!(
        assess("PersistentVolumeClaim", &bound).health,
        Health::Available
    );
    let pending = json!({"status": {"phase": "Pending"}});
    assert_eq!(
        assess("PersistentVolumeClaim", &pending).health,
        Health::Progressing
    );
    let lost = json!({"status": {"phase": "Lost"}});
    assert_eq!(
        assess("PersistentVolumeClaim", &lost).health,
        Health::Failed
    );

    let crd = json!({"status": {"acceptedNames": {"kind": "Widget", "plural": "widgets"},
        "storedVersions": ["v1"],
        "conditions": [{"type": "NamesAccepted", "status": "True", "reason": "NoConflicts"},
                       {"type": "Established", "status": "True", "reason": "InitialNamesAccepted"}]}});
    assert_eq!(
        assess("CustomResourceDefinition", &crd).health,
        Health::Available
    );
    let clash = json!({"status": {"conditions": [
        {"type": "NamesAccepted", "status": "False", "reason": "PluralConflict",
         "message": "\"widgets\" is already in use"},
        {"type": "Established", "status": "False", "reason": "NotAccepted"}]}});
    assert_eq!(
        assess("CustomResourceDefinition", &clash).health,
        Health::Failed
    );

    let ns = json!({"status": {"phase": "Active"}});
    assert_eq!(assess("Namespace", &ns).health, Health::Available);
    let terminating = json!({"status": {"phase": "Terminating"}});
    assert_eq!(assess("Namespace", &terminating).health, Health::Degraded);
}

#[test]
fn any_kind_with_ready_conditions_and_observed_generation() {
    // A cert-manager Certificate.
    let cert = json!({
        "apiVersion": "cert-manager.io/v1", "kind": "Certificate",
        "metadata": {"generation": 2},
        "status": {"observedGeneration": 2, "notAfter": "2027-02-20T10:00:00Z",
            "conditions": [{"type": "Ready", "status": "False", "reason": "Issuing",
                            "message": "Issuing certificate as Secret does not exist",
                            "observedGeneration": 2}]}
    });
    let a = assess("Certificate", &cert);
    assert_eq!(a.health, Health::Degraded);
    assert_eq!(a.observed_generation, Some(2));
    let mut ready = cert.clone();
    ready["status"]["conditions"][0]["status"] = json!("True");
    assert_eq!(assess("Certificate", &ready).health, Health::Available);
    let mut stale = ready.clone();
    stale["metadata"]["generation"] = json!(3);
    assert_eq!(assess("Certificate", &stale).health, Health::Progressing);
    let configmap = json!({"data": {"k": "v"}});
    assert_eq!(assess("ConfigMap", &configmap).health, Health::Available);
}
