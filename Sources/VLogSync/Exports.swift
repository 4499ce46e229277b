// The wire objects a client sends and receives (``SyncPush``, ``SyncPage``, ``WireEvent``,
// ``ErrorBody`` …) come with the client: an app that imports VLogSync needs no second import.
@_exported public import VLogWire
