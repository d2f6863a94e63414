//! The `zoo.cfg` reader's tests: defaults, keys, errors that name their line.

use super::*;

#[test]
fn defaults() {
    let c = ServerConfig::default();
    assert_eq!(c.client_port, 2181);
    assert_eq!(c.min_session_timeout(), 4000);
    assert_eq!(c.max_session_timeout(), 40000);
    assert_eq!(c.wal_dir(), PathBuf::from("zlock-data/wal"));
}

#[test]
fn parses_zoo_cfg() {
    let mut c = ServerConfig::default();
    c.apply_text(
        Path::new("zoo.cfg"),
        "# comment\ntickTime=1000\nclientPort=2999\ndataDir=/tmp/x\n\
         4lw.commands.whitelist=ruok, mntr\nextendedTypesEnabled=true\nfoo=bar\n\
         zlock.commitSpinMicros=0\n",
    )
    .unwrap();
    assert_eq!(c.commit_spin(), std::time::Duration::ZERO);
    assert_eq!(c.tick_time_ms, 1000);
    assert_eq!(c.client_port, 2999);
    assert_eq!(c.max_session_timeout(), 20000);
    assert!(c.four_letter_allowed("mntr"));
    assert!(!c.four_letter_allowed("dump"));
    assert!(c.extended_types);
}

#[test]
fn lock_delay_is_read_in_ms_and_bounded() {
    let mut c = ServerConfig::default();
    assert_eq!(
        c.lock_delay_ms, 0,
        "none unless configured, as in ZooKeeper"
    );
    c.apply_text(Path::new("zoo.cfg"), "zlock.lockDelayMs=1500\n")
        .unwrap();
    assert_eq!(c.lock_delay_ms, 1500);
    for bad in ["60001", "-1", "1s"] {
        let e = c
            .apply_text(Path::new("zoo.cfg"), &format!("zlock.lockDelayMs={bad}\n"))
            .unwrap_err();
        assert!(e.to_string().contains("zlock.lockDelayMs"), "{e}");
    }
    assert_eq!(c.lock_delay_ms, 1500);
}

#[test]
fn pre_alloc_size_is_in_kib() {
    let mut c = ServerConfig::default();
    assert_eq!(c.wal_preallocate_bytes, 4 << 20);
    c.apply_text(Path::new("zoo.cfg"), "preAllocSize=65536\n")
        .unwrap();
    assert_eq!(c.wal_preallocate_bytes, 64 << 20);
    c.apply_text(Path::new("zoo.cfg"), "preAllocSize=0\n")
        .unwrap();
    assert_eq!(c.wal_preallocate_bytes, 0);
    for bad in ["-1", "4M", "18014398509481984"] {
        let e = c
            .apply_text(Path::new("zoo.cfg"), &format!("preAllocSize={bad}\n"))
            .unwrap_err();
        assert!(e.to_string().contains("preAllocSize"), "{e}");
    }
}

#[test]
fn errors_name_the_line() {
    let mut c = ServerConfig::default();
    let e = c
        .apply_text(Path::new("zoo.cfg"), "tickTime=2000\nclientPort=abc\n")
        .unwrap_err();
    assert!(e.to_string().contains("zoo.cfg:2"), "{e}");
    let e = c
        .apply_text(Path::new("z"), "minSessionTimeout=9\nmaxSessionTimeout=1\n")
        .unwrap_err();
    assert!(matches!(e, ConfigError::SessionTimeouts { .. }));
}

#[test]
fn unknown_and_ensemble_only_keys_are_reported_as_ignored() {
    let mut c = ServerConfig::default();
    let ignored = c
        .apply_text(
            Path::new("zoo.cfg"),
            "tickTime=2000\ninitLimit=10\nsyncLimit=5\nautopurge.purgeInterval=1\n\
             clientPort=2999\nfoo.bar=1\nquorum.auth.enableSasl=false\ncnxTimeout=5000\n\
             electionAlg=3\n",
        )
        .unwrap();
    let got: Vec<(usize, &str, Ignored)> = ignored
        .iter()
        .map(|i| (i.line, i.key.as_str(), i.why))
        .collect();
    assert_eq!(
        got,
        [
            (4, "autopurge.purgeInterval", Ignored::Unknown),
            (6, "foo.bar", Ignored::Unknown),
            (7, "quorum.auth.enableSasl", Ignored::EnsembleOnly),
            (8, "cnxTimeout", Ignored::EnsembleOnly),
            (9, "electionAlg", Ignored::EnsembleOnly),
        ]
    );
    // Known keys still apply around them; initLimit and syncLimit are known now.
    assert_eq!(c.client_port, 2999);
    assert_eq!((c.init_limit, c.sync_limit), (10, 5));
}

#[test]
fn listen_backlog_under_zookeepers_name() {
    let mut c = ServerConfig::default();
    let ignored = c
        .apply_text(Path::new("zoo.cfg"), "clientPortListenBacklog=77\n")
        .unwrap();
    assert!(ignored.is_empty());
    assert_eq!(c.listen_backlog, 77);
    c.apply_text(Path::new("zoo.cfg"), "listenBacklog=88\n")
        .unwrap();
    assert_eq!(c.listen_backlog, 88);
}

#[test]
fn admin_server_keys() {
    let mut c = ServerConfig::default();
    assert!(!c.admin.enabled);
    let ignored = c
        .apply_text(
            Path::new("zoo.cfg"),
            "admin.enableServer=true\nadmin.serverAddress=0.0.0.0\n\
             admin.serverPort=8081\nadmin.commandURL=/cmds\nadmin.idleTimeout=5000\n",
        )
        .unwrap();
    assert!(c.admin.enabled);
    assert_eq!(c.admin.server_address, IpAddr::from([0, 0, 0, 0]));
    assert_eq!(
        (c.admin.server_port, c.admin.command_url.as_str()),
        (8081, "/cmds")
    );
    assert_eq!(
        ignored
            .iter()
            .map(|i| (i.line, i.key.as_str(), i.why))
            .collect::<Vec<_>>(),
        [(5, "admin.idleTimeout", Ignored::NotApplicable)]
    );
    assert!(c
        .apply_text(Path::new("zoo.cfg"), "admin.serverPort=http\n")
        .is_err());
}

#[test]
fn metrics_provider_keys() {
    let mut c = ServerConfig::default();
    assert!(!c.metrics.enabled);
    let ignored = c
        .apply_text(
            Path::new("zoo.cfg"),
            "metricsProvider.className=org.apache.zookeeper.metrics.prometheus.\
             PrometheusMetricsProvider\nmetricsProvider.httpPort=7001\n\
             metricsProvider.httpHost=0.0.0.0\nmetricsProvider.exportJvmInfo=true\n",
        )
        .unwrap();
    assert!(c.metrics.enabled);
    assert_eq!(c.metrics.http_port, 7001);
    assert_eq!(c.metrics.http_host, IpAddr::from([0, 0, 0, 0]));
    assert_eq!(
        ignored
            .iter()
            .map(|i| (i.line, i.key.as_str(), i.why))
            .collect::<Vec<_>>(),
        [(4, "metricsProvider.exportJvmInfo", Ignored::NotApplicable)]
    );
    let e = c
        .apply_text(
            Path::new("zoo.cfg"),
            "metricsProvider.className=com.example.Other\n",
        )
        .unwrap_err();
    assert!(e.to_string().contains("zoo.cfg:1"), "{e}");
    assert!(e.to_string().contains(PROMETHEUS_CLASS), "{e}");
}

#[test]
fn global_outstanding_limit_is_read_and_at_least_one() {
    let mut c = ServerConfig::default();
    assert_eq!(c.global_outstanding_limit, 8192);
    c.apply_text(Path::new("zoo.cfg"), "globalOutstandingLimit=1000\n")
        .unwrap();
    assert_eq!(c.global_outstanding_limit, 1000);
    c.apply_text(Path::new("zoo.cfg"), "globalOutstandingLimit=0\n")
        .unwrap();
    assert_eq!(c.global_outstanding_limit, 1, "a queue needs room for one");
}

#[test]
fn ensemble_id_is_read_and_checked() {
    let mut c = ServerConfig::default();
    assert_eq!(c.ensemble_id, None);
    c.apply_text(Path::new("zoo.cfg"), "zlock.ensembleId=1a2b3c4d-5e6f7a8b\n")
        .unwrap();
    assert_eq!(c.ensemble_id.as_deref(), Some("1a2b3c4d-5e6f7a8b"));
    for bad in ["a b", "", "x/y"] {
        let e = c
            .apply_text(Path::new("zoo.cfg"), &format!("zlock.ensembleId={bad}\n"))
            .unwrap_err();
        assert!(e.to_string().contains("zlock.ensembleId"), "{e}");
    }
}
