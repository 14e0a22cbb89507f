//! Containment in the console (issue 18, point 6): a browser signed in with a
//! token limited to sessions sees and decides nothing of another session.
//! Plain HTTP against the console, signed in through its form; both backends.

use crate::console::{Browserless, form, get, post, reviews, session, sign_in};
use crate::containment::scoped_token;
use crate::helpers::{TestApp, spawn_app};

/// Sends a console form of `who`, with its CSRF token, as its page would.
async fn send(app: &TestApp, path: &str, who: &Browserless, fields: &[(&str, &str)]) -> u16 {
    let mut fields = fields.to_vec();
    fields.push(("csrf", &who.csrf));
    post(app, path, Some(who), form(&fields), &[])
        .await
        .status
        .as_u16()
}

#[tokio::test]
async fn a_scoped_tokens_console_opens_decides_and_lists_only_its_sessions() {
    let app = spawn_app().await;
    let (mine, mine_agent) = session(&app, 3).await;
    let (other, other_agent) = session(&app, 3).await;
    let my_reviews = reviews(&app, &mine_agent, &mine, 2).await;
    let other_reviews = reviews(&app, &other_agent, &other, 2).await;
    let (secret, _) = scoped_token(&app, "reviewer", &[&mine]).await;
    let who = sign_in(&app, &secret).await;

    // Its own session, quest and review entry open.
    for path in [
        format!("/ui/sessions/{mine}"),
        format!("/ui/quests/{}", my_reviews[1]),
        format!("/ui/review?session={mine}&quest={}", my_reviews[1]),
    ] {
        get(&app, &path, Some(&who)).await.expect(200);
    }
    // Another session's page, export, quest, review entry and stream do not.
    let foreign = &other_reviews[0];
    for path in [
        format!("/ui/sessions/{other}"),
        format!("/ui/sessions/{other}/export?format=csv"),
        format!("/ui/quests/{foreign}"),
        format!("/ui/review?quest={foreign}"),
        format!("/ui/review?session={other}"),
        format!("/ui/review/bulk?session={other}&decision=approve"),
        format!("/ui/events?session={other}"),
    ] {
        let page = get(&app, &path, Some(&who)).await;
        assert_eq!(page.status.as_u16(), 403, "{path}: {}", page.body);
        assert!(page.body.contains("Out of scope"), "{path}: {}", page.body);
    }

    // The lists show only its sessions: the dashboard, the review queue, a bulk decision.
    let dashboard = get(&app, "/ui", Some(&who)).await;
    assert!(dashboard.expect(200).contains(&mine));
    assert!(!dashboard.body.contains(&other), "{}", dashboard.body);
    for path in ["/ui/review", "/ui/review/bulk?decision=approve"] {
        let page = get(&app, path, Some(&who)).await;
        let body = page.expect(200);
        for id in &my_reviews {
            assert!(body.contains(id.as_str()), "{path} lists {id}");
        }
        for id in &other_reviews {
            assert!(!body.contains(id.as_str()), "{path} must not list {id}");
        }
    }

    // Its forms cannot claim, decide or bulk-decide another session's quests.
    let decide = format!("/ui/review/{foreign}/decide");
    let release = format!("/ui/review/{foreign}/release");
    let bulk = [
        ("decision", "approve"),
        ("quest", other_reviews[1].as_str()),
    ];
    assert_eq!(
        send(&app, &decide, &who, &[("decision", "approve")]).await,
        403
    );
    assert_eq!(send(&app, &release, &who, &[]).await, 403);
    assert_eq!(send(&app, "/ui/review/bulk", &who, &bulk).await, 403);
    let mixed = [
        ("decision", "approve"),
        ("quest", my_reviews[0].as_str()),
        ("quest", other_reviews[1].as_str()),
    ];
    assert_eq!(send(&app, "/ui/review/bulk", &who, &mixed).await, 403);
    for id in my_reviews.iter().chain(&other_reviews) {
        let quest = app.quest(id).await;
        assert_eq!(quest["state"], "REVIEW", "{quest}");
    }
    assert!(app.quest(foreign).await["review_claimed_by"].is_null());
}
