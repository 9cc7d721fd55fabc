"""The values the whole domain speaks (and the other layers with it), with no state of
their own.

- ``errors``: the one error tree of contextledger;
- ``validation``: checks of argument values, raising typed errors naming the argument;
- ``messages``: ``Message`` and its parts, validated and frozen; ``items``: Responses
  items <-> chat-completions messages; ``tools``: tool definitions;
- ``policy``: ``ReductionPolicy``; ``reduction``: the pure functions of reduction
  (what is summarized, how the working memory looks); ``windows``: models' context
  windows and the cap derived from them;
- ``digests``: the digest chain that makes an altered stored event detectable;
- ``redaction``: text from outside made safe to store and to print.

The bottom of the domain. May import: no other room (nothing of the package).
"""
