//! Leases over HTTP: a stale or foreign lease changes nothing, heartbeats
//! extend and releases give the quest back without a try, lapses end an
//! abandoned quest, and the sweeper keeps the status honest.

use reqwest::Method;
use serde_json::json;

use crate::helpers::*;

#[tokio::test]
async fn a_stale_or_foreign_lease_is_refused_and_changes_nothing() {
    let app = spawn_app().await;
    let agent = app.token("agent", "bot").await;
    let session = app.scan(contact_config(3), companies(2)).await;
    let (q1, l1) = assigned(&app.next(&agent, &session, "one").await);
    let (q2, l2) = assigned(&app.next(&agent, &session, "two").await);
    assert_ne!(q1, q2, "two agents never hold the same quest");

    // A lease of another quest, and a lease id that never existed.
    app.submit(&agent, &q1, &l2, json!({"email": "a@b.test"}))
        .await
        .refused(409, "lease_lost");
    app.submit(
        &agent,
        &q1,
        &uuid::Uuid::new_v4().to_string(),
        json!({"email": "a@b.test"}),
    )
    .await
    .refused(409, "lease_lost");
    // Another token presenting the right lease id is not its holder.
    let other = app.token("agent", "intruder").await;
    app.submit(&other, &q1, &l1, json!({"email": "a@b.test"}))
        .await
        .refused(409, "lease_lost");
    let view = app.quest(&q1).await;
    assert_eq!(
        (view["state"].as_str(), view["phase"].as_str()),
        (Some("TODO"), Some("leased"))
    );
    assert!(view["submissions"].as_array().unwrap().is_empty());

    // After expiry and a new lease by someone else, the old holder's lease is gone.
    app.clock.advance(std::time::Duration::from_secs(301));
    app.submit(&agent, &q1, &l1, json!({"email": "a@b.test"}))
        .await
        .refused(409, "lease_expired");
    let taken = app.next(&other, &session, "thief").await;
    assert_eq!(
        assigned(&taken).0,
        q1,
        "the expired quest is reclaimed inside the claim"
    );
    app.submit(&agent, &q1, &l1, json!({"email": "a@b.test"}))
        .await
        .refused(409, "lease_expired");
    let view = app.quest(&q1).await;
    assert_eq!(view["lapses"], 1);
    assert!(view["submissions"].as_array().unwrap().is_empty());
}

#[tokio::test]
async fn heartbeat_extends_and_release_returns_the_quest_without_a_try() {
    let app = spawn_app().await;
    let agent = app.token("agent", "bot").await;
    let session = app.scan(contact_config(3), companies(1)).await;
    let next = app.next(&agent, &session, "a").await;
    let (quest, lease) = assigned(&next);

    app.clock.advance(std::time::Duration::from_secs(200));
    let beat = app
        .post(
            &format!("/v1/quests/{quest}/heartbeat"),
            &agent,
            json!({"lease_id": lease}),
        )
        .await
        .expect(200);
    assert!(beat["expires_at"].as_str().unwrap() > next["lease"]["expires_at"].as_str().unwrap());
    app.clock.advance(std::time::Duration::from_secs(200));
    assert_eq!(
        app.next(&agent, &session, "a").await["lease"]["id"],
        lease,
        "the heartbeat kept the lease alive"
    );

    let released = app
        .call(
            Method::POST,
            &format!("/v1/quests/{quest}/release"),
            Some(&agent),
            Some(json!({"lease_id": lease})),
        )
        .await;
    assert_eq!(released.status, 204);
    let view = app.quest(&quest).await;
    assert_eq!(
        (
            view["phase"].as_str(),
            view["tries"].as_u64(),
            view["lapses"].as_u64()
        ),
        (Some("open"), Some(0), Some(0))
    );
    app.post(
        &format!("/v1/quests/{quest}/heartbeat"),
        &agent,
        json!({"lease_id": lease}),
    )
    .await
    .refused(409, "lease_lost");
    let (again, new_lease) = assigned(&app.next(&agent, &session, "b").await);
    assert_eq!(again, quest);
    assert_ne!(new_lease, lease);
}

#[tokio::test]
async fn a_quest_abandoned_max_lapses_times_ends_in_done_with_a_fact() {
    let app = spawn_app().await;
    let agent = app.token("agent", "bot").await;
    let mut config = contact_config(3);
    config["max_lapses"] = json!(2);
    config["lease_seconds"] = json!(10);
    let session = app.scan(config, companies(1)).await;
    for lapse in 1..=2 {
        let (quest, _) = assigned(&app.next(&agent, &session, &format!("a{lapse}")).await);
        app.clock.advance(std::time::Duration::from_secs(11));
        if lapse == 2 {
            assert_eq!(
                app.next(&agent, &session, "late").await["status"],
                "finished"
            );
            let view = app.quest(&quest).await;
            assert_eq!(
                (view["state"].as_str(), view["decided_by"].as_str()),
                (Some("DONE"), Some("limit"))
            );
            assert_eq!(view["last_facts"][0]["check"], "lapses");
            assert_eq!(view["tries"], 0, "lapses are not tries");
        }
    }
}

#[tokio::test]
async fn the_sweeper_step_returns_expired_leases_so_status_stays_honest() {
    let app = spawn_app().await;
    let agent = app.token("agent", "bot").await;
    let session = app.scan(contact_config(3), companies(3)).await;
    app.next(&agent, &session, "a").await;
    app.next(&agent, &session, "b").await;
    assert_eq!(app.status(&session).await["leased"], 2);
    assert_eq!(app.status(&session).await["agents_active"], 2);
    app.clock.advance(std::time::Duration::from_secs(301));
    // The sweeper's step, driven directly on the server's store.
    assert_eq!(
        quest::workers::sweeper::run_once(app.store.as_ref())
            .await
            .unwrap(),
        2
    );
    let status = app.status(&session).await;
    assert_eq!(
        (status["leased"].as_u64(), status["open"].as_u64()),
        (Some(0), Some(3))
    );
    assert_sums(&status);
}
