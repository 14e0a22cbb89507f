//! The files a session gives back: its export in each format, within the
//! export slots, and the uploaded file as it came.

use crate::domain::ids::{SessionId, TokenId};
use crate::domain::quality::Quality;
use crate::export::{self, ExportFormat, Plan};

use super::{Export, Service, ServiceError, Source, invalid};

impl Service {
    /// An export of a session in `format` for `token`, when an export slot
    /// is free for it, with the quality figures taken as it starts (the XLSX
    /// sheet and the caller's header give the same ones). Its columns are the
    /// session's, the quest's, and the gate's declared fields.
    pub async fn export_session(
        &self,
        id: SessionId,
        format: ExportFormat,
        token: TokenId,
    ) -> Result<(Export, Quality), ServiceError> {
        let session = self.session(id).await?;
        let declared = self
            .checker
            .registry()
            .build(&session.config.gate)
            .map(|g| g.declared_fields())
            .unwrap_or_default();
        let slot = self.exports.try_slot(format, token).map_err(|no| {
            let (code, message) = match no {
                export::NoSlot::Server { capacity } => (
                    "exports_busy",
                    format!("{capacity} exports are running, as many as this server runs at once; retry in a few seconds"),
                ),
                export::NoSlot::Token => (
                    "token_exports_busy",
                    format!(
                        "this token runs {} exports already, as many as one token may; finish reading one, or retry in a few seconds",
                        export::slots::PER_TOKEN
                    ),
                ),
            };
            ServiceError::Busy {
                code,
                message,
                retry_after_seconds: export::RETRY_AFTER_SECONDS,
            }
        })?;
        let plan = Plan::new(self.store.as_ref(), id, declared).await?;
        let quality = self.get_session_quality(id).await?;
        let export = match format {
            ExportFormat::Xlsx => {
                let file = export::xlsx::build(
                    self.store.clone(),
                    plan,
                    quality.clone(),
                    self.exports.temp_dir(),
                    slot,
                )
                .await
                .map_err(|e| match e {
                    export::xlsx::XlsxExportError::Store(e) => ServiceError::Store(e),
                    e @ export::xlsx::XlsxExportError::TooWide(_) => {
                        invalid("export_failed", e.to_string())
                    }
                    e @ (export::xlsx::XlsxExportError::Write(_)
                    | export::xlsx::XlsxExportError::Cancelled) => {
                        ServiceError::Fault(format!("the XLSX export failed: {e}"))
                    }
                })?;
                Export::File(file)
            }
            _ => Export::Stream(Box::pin(export::stream(
                self.store.clone(),
                plan,
                format,
                slot,
                self.exports.idle(),
            ))),
        };
        Ok((export, quality))
    }

    /// The uploaded file of a session, read one stored piece at a time.
    pub async fn get_session_source(&self, id: SessionId) -> Result<Source, ServiceError> {
        let info = self.store.source_info(id).await?;
        let (store, pieces) = (self.store.clone(), info.pieces);
        let body = futures_util::stream::try_unfold(0u64, move |seq| {
            let store = store.clone();
            async move {
                if seq >= pieces {
                    return Ok(None);
                }
                let piece = store.source_chunk(id, seq).await?.unwrap_or_default();
                Ok(Some((axum::body::Bytes::from(piece), seq + 1)))
            }
        });
        Ok(Source {
            name: info.name,
            media_type: info.media_type,
            size: info.size,
            body: Box::pin(body),
        })
    }
}
