//! A fake OpenAI-compatible chat-completions server on 127.0.0.1:0 that records
//! every request and answers as the test tells it to (real HTTP, the real JSON shape).

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::Json;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};

/// How the fake answers.
#[derive(Clone)]
pub enum Behaviour {
    /// Replies with the text the function makes of the user message.
    Reply(Arc<dyn Fn(&str) -> String + Send + Sync>),
    /// Answers with this HTTP status and an error body.
    Status(u16),
    /// Answers with this HTTP status and exactly this body.
    StatusBody(u16, String),
    /// Waits this long, then replies.
    Slow(Duration, String),
    /// Never answers.
    Hang,
}

impl Behaviour {
    /// Always the same reply.
    pub fn says(text: &str) -> Behaviour {
        let text = text.to_owned();
        Behaviour::Reply(Arc::new(move |_| text.clone()))
    }

    /// `yes` when the user message contains `needle`, else `no`.
    pub fn flags_when(needle: &str, yes: &str, no: &str) -> Behaviour {
        let (needle, yes, no) = (needle.to_owned(), yes.to_owned(), no.to_owned());
        Behaviour::Reply(Arc::new(move |prompt| {
            if prompt.contains(&needle) {
                yes.clone()
            } else {
                no.clone()
            }
        }))
    }
}

#[derive(Clone)]
struct Shared {
    model: String,
    behaviour: Behaviour,
    requests: Arc<Mutex<Vec<Value>>>,
    in_flight: Arc<AtomicUsize>,
    max_in_flight: Arc<AtomicUsize>,
}

/// A running fake; it stops when dropped.
pub struct FakeLlm {
    /// `http://127.0.0.1:PORT/v1`
    pub base_url: String,
    shared: Shared,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for FakeLlm {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl FakeLlm {
    /// Starts a fake serving `model`.
    pub async fn start(model: &str, behaviour: Behaviour) -> FakeLlm {
        let shared = Shared {
            model: model.to_owned(),
            behaviour,
            requests: Arc::default(),
            in_flight: Arc::default(),
            max_in_flight: Arc::default(),
        };
        let router = axum::Router::new()
            .route("/v1/chat/completions", axum::routing::post(complete))
            .with_state(shared.clone());
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let base_url = format!("http://{}/v1", listener.local_addr().unwrap());
        let task = tokio::spawn(async move {
            let _ = axum::serve(listener, router).await;
        });
        FakeLlm {
            base_url,
            shared,
            task,
        }
    }

    /// Every request body received, in order.
    pub fn requests(&self) -> Vec<Value> {
        self.shared.requests.lock().unwrap().clone()
    }

    /// The most requests it was handling at once.
    pub fn max_in_flight(&self) -> usize {
        self.shared.max_in_flight.load(Ordering::SeqCst)
    }
}

/// A loopback URL where nothing listens: connections are refused.
pub fn down_url() -> String {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    drop(listener);
    format!("http://127.0.0.1:{port}/v1")
}

struct InFlight(Arc<AtomicUsize>);

impl Drop for InFlight {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

async fn complete(State(s): State<Shared>, Json(body): Json<Value>) -> Response {
    s.requests.lock().unwrap().push(body.clone());
    let now = s.in_flight.fetch_add(1, Ordering::SeqCst) + 1;
    s.max_in_flight.fetch_max(now, Ordering::SeqCst);
    let _guard = InFlight(s.in_flight.clone());
    let user = body["messages"]
        .as_array()
        .and_then(|m| m.iter().find(|m| m["role"] == "user"))
        .and_then(|m| m["content"].as_str())
        .unwrap_or_default()
        .to_owned();
    let text = match &s.behaviour {
        Behaviour::Reply(f) => f(&user),
        Behaviour::Status(code) => {
            let status = StatusCode::from_u16(*code).unwrap();
            let error =
                json!({"error": {"message": "the model is overloaded", "type": "server_error"}});
            return (status, Json(error)).into_response();
        }
        Behaviour::StatusBody(code, body) => {
            return (StatusCode::from_u16(*code).unwrap(), body.clone()).into_response();
        }
        Behaviour::Slow(wait, text) => {
            tokio::time::sleep(*wait).await;
            text.clone()
        }
        Behaviour::Hang => std::future::pending().await,
    };
    Json(json!({
        "id": "chatcmpl-fake",
        "object": "chat.completion",
        "created": 1_700_000_000,
        "model": s.model,
        "choices": [{
            "index": 0,
            "message": {"role": "assistant", "content": text},
            "finish_reason": "stop"
        }],
        "usage": {"prompt_tokens": 100, "completion_tokens": 5, "total_tokens": 105}
    }))
    .into_response()
}
