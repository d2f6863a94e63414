//! Small durable values of the Raft member (the vote, the purge point, the committed
//! position), each in its own file. Placeholder until zlock-store's checked meta file
//! lands: write to a temp file, fsync, rename, fsync the directory.

use std::path::PathBuf;

pub struct MetaFile {
    path: PathBuf,
}

impl MetaFile {
    pub fn new(path: PathBuf) -> MetaFile {
        MetaFile { path }
    }

    pub fn store(&self, bytes: &[u8]) -> std::io::Result<()> {
        let tmp = self.path.with_extension("tmp");
        let mut body = crc32c::crc32c(bytes).to_le_bytes().to_vec();
        body.extend_from_slice(bytes);
        {
            use std::io::Write;
            let mut f = std::fs::File::create(&tmp)?;
            f.write_all(&body)?;
            f.sync_data()?;
        }
        std::fs::rename(&tmp, &self.path)?;
        if let Some(dir) = self.path.parent() {
            std::fs::File::open(dir)?.sync_all()?;
        }
        Ok(())
    }

    pub fn load(&self) -> std::io::Result<Option<Vec<u8>>> {
        let body = match std::fs::read(&self.path) {
            Ok(b) => b,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(e),
        };
        if body.len() < 4 || crc32c::crc32c(&body[4..]).to_le_bytes() != body[..4] {
            return Err(std::io::Error::other(format!(
                "{} is damaged",
                self.path.display()
            )));
        }
        Ok(Some(body[4..].to_vec()))
    }
}
