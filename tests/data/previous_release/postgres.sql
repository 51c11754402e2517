--
-- PostgreSQL database dump
--

\restrict 32bSDXkNLQWMLzRt1QOvZNC7sc2Hm6X88AWL6fCTLZLlRQ6B6gTOFA3Ypmf8T5W

-- Dumped from database version 15.18 (Debian 15.18-0+deb12u1)
-- Dumped by pg_dump version 15.18 (Debian 15.18-0+deb12u1)

SET statement_timeout = 0;
SET lock_timeout = 0;
SET idle_in_transaction_session_timeout = 0;
SET client_encoding = 'UTF8';
SET standard_conforming_strings = on;
SELECT pg_catalog.set_config('search_path', '', false);
SET check_function_bodies = false;
SET xmloption = content;
SET client_min_messages = warning;
SET row_security = off;

--
-- Name: batonmq_s_batonmq; Type: SCHEMA; Schema: -; Owner: -
--

CREATE SCHEMA batonmq_s_batonmq;


SET default_tablespace = '';

SET default_table_access_method = heap;

--
-- Name: bindings; Type: TABLE; Schema: batonmq_s_batonmq; Owner: -
--

CREATE TABLE batonmq_s_batonmq.bindings (
    broker_id text NOT NULL,
    vhost text NOT NULL,
    source text NOT NULL,
    destination_kind text NOT NULL,
    destination text NOT NULL,
    routing_key text NOT NULL,
    arguments text NOT NULL
);


--
-- Name: brokers; Type: TABLE; Schema: batonmq_s_batonmq; Owner: -
--

CREATE TABLE batonmq_s_batonmq.brokers (
    broker_id text NOT NULL,
    epoch bigint NOT NULL,
    state text NOT NULL,
    started_at timestamp with time zone NOT NULL
);


--
-- Name: counters; Type: TABLE; Schema: batonmq_s_batonmq; Owner: -
--

CREATE TABLE batonmq_s_batonmq.counters (
    name text NOT NULL,
    value bigint NOT NULL
);


--
-- Name: entries; Type: TABLE; Schema: batonmq_s_batonmq; Owner: -
--

CREATE TABLE batonmq_s_batonmq.entries (
    broker_id text NOT NULL,
    vhost text NOT NULL,
    queue text NOT NULL,
    sequence bigint NOT NULL,
    message_id bigint NOT NULL,
    delivery_count integer NOT NULL,
    transient boolean NOT NULL,
    expires_at bigint,
    priority integer DEFAULT 0 NOT NULL
);


--
-- Name: exchanges; Type: TABLE; Schema: batonmq_s_batonmq; Owner: -
--

CREATE TABLE batonmq_s_batonmq.exchanges (
    broker_id text NOT NULL,
    vhost text NOT NULL,
    name text NOT NULL,
    type text NOT NULL,
    auto_delete boolean NOT NULL,
    internal boolean NOT NULL,
    arguments text NOT NULL
);


--
-- Name: messages; Type: TABLE; Schema: batonmq_s_batonmq; Owner: -
--

CREATE TABLE batonmq_s_batonmq.messages (
    broker_id text NOT NULL,
    id bigint NOT NULL,
    exchange text NOT NULL,
    routing_key text NOT NULL,
    header_payload bytea NOT NULL,
    body bytea NOT NULL,
    checksum bigint
);


--
-- Name: meta; Type: TABLE; Schema: batonmq_s_batonmq; Owner: -
--

CREATE TABLE batonmq_s_batonmq.meta (
    key text NOT NULL,
    value text NOT NULL
);


--
-- Name: quarantined_messages; Type: TABLE; Schema: batonmq_s_batonmq; Owner: -
--

CREATE TABLE batonmq_s_batonmq.quarantined_messages (
    broker_id text NOT NULL,
    vhost text NOT NULL,
    queue text NOT NULL,
    sequence bigint NOT NULL,
    delivery_count integer NOT NULL,
    message_id bigint NOT NULL,
    exchange text NOT NULL,
    routing_key text NOT NULL,
    header_payload bytea NOT NULL,
    body bytea NOT NULL,
    checksum bigint,
    quarantined_at timestamp with time zone NOT NULL
);


--
-- Name: queues; Type: TABLE; Schema: batonmq_s_batonmq; Owner: -
--

CREATE TABLE batonmq_s_batonmq.queues (
    broker_id text NOT NULL,
    vhost text NOT NULL,
    name text NOT NULL,
    auto_delete boolean NOT NULL,
    arguments text NOT NULL
);


--
-- Name: users; Type: TABLE; Schema: batonmq_s_batonmq; Owner: -
--

CREATE TABLE batonmq_s_batonmq.users (
    name text NOT NULL,
    credential text NOT NULL
);


--
-- Name: vhosts; Type: TABLE; Schema: batonmq_s_batonmq; Owner: -
--

CREATE TABLE batonmq_s_batonmq.vhosts (
    name text NOT NULL
);


--
-- Data for Name: bindings; Type: TABLE DATA; Schema: batonmq_s_batonmq; Owner: -
--

INSERT INTO batonmq_s_batonmq.bindings VALUES ('batonmq', '/', 'orders', 'exchange', 'audit', '#', '{}');
INSERT INTO batonmq_s_batonmq.bindings VALUES ('batonmq', '/', 'orders', 'queue', 'plain', 'order.*', '{}');
INSERT INTO batonmq_s_batonmq.bindings VALUES ('batonmq', '/', 'audit', 'queue', 'audit-log', 'audit-log', '{}');


--
-- Data for Name: brokers; Type: TABLE DATA; Schema: batonmq_s_batonmq; Owner: -
--

INSERT INTO batonmq_s_batonmq.brokers VALUES ('batonmq', 1, 'stopped', '2026-11-25 18:57:53.001847+00');


--
-- Data for Name: counters; Type: TABLE DATA; Schema: batonmq_s_batonmq; Owner: -
--

INSERT INTO batonmq_s_batonmq.counters VALUES ('message_id_block', 1);


--
-- Data for Name: entries; Type: TABLE DATA; Schema: batonmq_s_batonmq; Owner: -
--

INSERT INTO batonmq_s_batonmq.entries VALUES ('batonmq', '/', 'audit-log', 0, 1099511627776, 0, false, NULL, 0);
INSERT INTO batonmq_s_batonmq.entries VALUES ('batonmq', '/', 'audit-log', 1, 1099511627777, 0, false, NULL, 0);
INSERT INTO batonmq_s_batonmq.entries VALUES ('batonmq', '/', 'audit-log', 2, 1099511627778, 0, false, NULL, 0);
INSERT INTO batonmq_s_batonmq.entries VALUES ('batonmq', '/', 'audit-log', 3, 1099511627779, 0, false, NULL, 0);
INSERT INTO batonmq_s_batonmq.entries VALUES ('batonmq', '/', 'audit-log', 4, 1099511627780, 0, false, NULL, 0);
INSERT INTO batonmq_s_batonmq.entries VALUES ('batonmq', '/', 'plain', 5, 1099511627781, 0, false, NULL, 0);
INSERT INTO batonmq_s_batonmq.entries VALUES ('batonmq', '/', 'audit-log', 5, 1099511627781, 0, false, NULL, 0);
INSERT INTO batonmq_s_batonmq.entries VALUES ('batonmq', '/', 'plain', 6, 1099511627782, 0, false, NULL, 0);
INSERT INTO batonmq_s_batonmq.entries VALUES ('batonmq', '/', 'audit-log', 6, 1099511627782, 0, false, NULL, 0);
INSERT INTO batonmq_s_batonmq.entries VALUES ('batonmq', '/', 'plain', 7, 1099511627783, 0, false, NULL, 0);
INSERT INTO batonmq_s_batonmq.entries VALUES ('batonmq', '/', 'audit-log', 7, 1099511627783, 0, false, NULL, 0);
INSERT INTO batonmq_s_batonmq.entries VALUES ('batonmq', '/', 'plain', 8, 1099511627784, 0, false, NULL, 0);
INSERT INTO batonmq_s_batonmq.entries VALUES ('batonmq', '/', 'audit-log', 8, 1099511627784, 0, false, NULL, 0);
INSERT INTO batonmq_s_batonmq.entries VALUES ('batonmq', '/', 'plain', 9, 1099511627785, 0, false, NULL, 0);
INSERT INTO batonmq_s_batonmq.entries VALUES ('batonmq', '/', 'audit-log', 9, 1099511627785, 0, false, NULL, 0);
INSERT INTO batonmq_s_batonmq.entries VALUES ('batonmq', '/', 'urgent', 0, 1099511627786, 0, false, NULL, 0);
INSERT INTO batonmq_s_batonmq.entries VALUES ('batonmq', '/', 'urgent', 1, 1099511627787, 0, false, NULL, 2);
INSERT INTO batonmq_s_batonmq.entries VALUES ('batonmq', '/', 'urgent', 2, 1099511627788, 0, false, NULL, 4);
INSERT INTO batonmq_s_batonmq.entries VALUES ('batonmq', '/', 'urgent', 3, 1099511627789, 0, false, NULL, 0);
INSERT INTO batonmq_s_batonmq.entries VALUES ('batonmq', '/', 'urgent', 4, 1099511627790, 0, false, NULL, 2);
INSERT INTO batonmq_s_batonmq.entries VALUES ('batonmq', '/', 'urgent', 5, 1099511627791, 0, false, NULL, 4);
INSERT INTO batonmq_s_batonmq.entries VALUES ('batonmq', '/', 'short-lived', 0, 1099511627792, 0, false, 2110993073122, 0);
INSERT INTO batonmq_s_batonmq.entries VALUES ('batonmq', '/', 'short-lived', 1, 1099511627793, 0, false, 2110993073123, 0);
INSERT INTO batonmq_s_batonmq.entries VALUES ('batonmq', '/', 'short-lived', 2, 1099511627794, 0, false, 2110993073124, 0);
INSERT INTO batonmq_s_batonmq.entries VALUES ('batonmq', '/', 'short-lived', 3, 1099511627795, 0, false, 2110993073125, 0);
INSERT INTO batonmq_s_batonmq.entries VALUES ('batonmq', '/', 'plain', 3, 1099511627779, 1, false, NULL, 0);
INSERT INTO batonmq_s_batonmq.entries VALUES ('batonmq', '/', 'plain', 4, 1099511627780, 1, false, NULL, 0);


--
-- Data for Name: exchanges; Type: TABLE DATA; Schema: batonmq_s_batonmq; Owner: -
--

INSERT INTO batonmq_s_batonmq.exchanges VALUES ('batonmq', '/', 'orders', 'topic', false, false, '{}');
INSERT INTO batonmq_s_batonmq.exchanges VALUES ('batonmq', '/', 'audit', 'fanout', false, false, '{}');


--
-- Data for Name: messages; Type: TABLE DATA; Schema: batonmq_s_batonmq; Owner: -
--

INSERT INTO batonmq_s_batonmq.messages VALUES ('batonmq', 1099511627776, 'orders', 'order.created', '\x003c00000000000000000007100002', '\x6f726465722030', 2965960261);
INSERT INTO batonmq_s_batonmq.messages VALUES ('batonmq', 1099511627777, 'orders', 'order.created', '\x003c00000000000000000007100002', '\x6f726465722031', 3352282835);
INSERT INTO batonmq_s_batonmq.messages VALUES ('batonmq', 1099511627778, 'orders', 'order.created', '\x003c00000000000000000007100002', '\x6f726465722032', 1590073193);
INSERT INTO batonmq_s_batonmq.messages VALUES ('batonmq', 1099511627779, 'orders', 'order.created', '\x003c00000000000000000007100002', '\x6f726465722033', 700557311);
INSERT INTO batonmq_s_batonmq.messages VALUES ('batonmq', 1099511627780, 'orders', 'order.created', '\x003c00000000000000000007100002', '\x6f726465722034', 3081056860);
INSERT INTO batonmq_s_batonmq.messages VALUES ('batonmq', 1099511627781, 'orders', 'order.created', '\x003c00000000000000000007100002', '\x6f726465722035', 3231843018);
INSERT INTO batonmq_s_batonmq.messages VALUES ('batonmq', 1099511627782, 'orders', 'order.created', '\x003c00000000000000000007100002', '\x6f726465722036', 1504400240);
INSERT INTO batonmq_s_batonmq.messages VALUES ('batonmq', 1099511627783, 'orders', 'order.created', '\x003c00000000000000000007100002', '\x6f726465722037', 783049702);
INSERT INTO batonmq_s_batonmq.messages VALUES ('batonmq', 1099511627784, 'orders', 'order.created', '\x003c00000000000000000007100002', '\x6f726465722038', 3188948599);
INSERT INTO batonmq_s_batonmq.messages VALUES ('batonmq', 1099511627785, 'orders', 'order.created', '\x003c00000000000000000007100002', '\x6f726465722039', 3373551329);
INSERT INTO batonmq_s_batonmq.messages VALUES ('batonmq', 1099511627786, '', 'urgent', '\x003c0000000000000000000b18000200', '\x757267656e742030207030', 1737983728);
INSERT INTO batonmq_s_batonmq.messages VALUES ('batonmq', 1099511627787, '', 'urgent', '\x003c0000000000000000000b18000202', '\x757267656e742031207032', 3709738534);
INSERT INTO batonmq_s_batonmq.messages VALUES ('batonmq', 1099511627788, '', 'urgent', '\x003c0000000000000000000b18000204', '\x757267656e742032207034', 3388322077);
INSERT INTO batonmq_s_batonmq.messages VALUES ('batonmq', 1099511627789, '', 'urgent', '\x003c0000000000000000000b18000200', '\x757267656e742033207030', 1965173022);
INSERT INTO batonmq_s_batonmq.messages VALUES ('batonmq', 1099511627790, '', 'urgent', '\x003c0000000000000000000b18000202', '\x757267656e742034207032', 3938512404);
INSERT INTO batonmq_s_batonmq.messages VALUES ('batonmq', 1099511627791, '', 'urgent', '\x003c0000000000000000000b18000204', '\x757267656e742035207034', 1411549604);
INSERT INTO batonmq_s_batonmq.messages VALUES ('batonmq', 1099511627792, '', 'short-lived', '\x003c000000000000000000051100020c333135333630303030303030', '\x74746c2030', 3408547785);
INSERT INTO batonmq_s_batonmq.messages VALUES ('batonmq', 1099511627793, '', 'short-lived', '\x003c000000000000000000051100020c333135333630303030303030', '\x74746c2031', 3157098335);
INSERT INTO batonmq_s_batonmq.messages VALUES ('batonmq', 1099511627794, '', 'short-lived', '\x003c000000000000000000051100020c333135333630303030303030', '\x74746c2032', 623128293);
INSERT INTO batonmq_s_batonmq.messages VALUES ('batonmq', 1099511627795, '', 'short-lived', '\x003c000000000000000000051100020c333135333630303030303030', '\x74746c2033', 1378033267);


--
-- Data for Name: meta; Type: TABLE DATA; Schema: batonmq_s_batonmq; Owner: -
--

INSERT INTO batonmq_s_batonmq.meta VALUES ('created_at', '2026-11-25 18:57:52.981607+00');
INSERT INTO batonmq_s_batonmq.meta VALUES ('schema_version', '6');
INSERT INTO batonmq_s_batonmq.meta VALUES ('software_version', '0.1.0');


--
-- Data for Name: quarantined_messages; Type: TABLE DATA; Schema: batonmq_s_batonmq; Owner: -
--



--
-- Data for Name: queues; Type: TABLE DATA; Schema: batonmq_s_batonmq; Owner: -
--

INSERT INTO batonmq_s_batonmq.queues VALUES ('batonmq', '/', 'plain', false, '{}');
INSERT INTO batonmq_s_batonmq.queues VALUES ('batonmq', '/', 'urgent', false, '{"x-max-priority":["int",5]}');
INSERT INTO batonmq_s_batonmq.queues VALUES ('batonmq', '/', 'short-lived', false, '{"x-message-ttl":["int",315360000000]}');
INSERT INTO batonmq_s_batonmq.queues VALUES ('batonmq', '/', 'audit-log', false, '{}');


--
-- Data for Name: users; Type: TABLE DATA; Schema: batonmq_s_batonmq; Owner: -
--

INSERT INTO batonmq_s_batonmq.users VALUES ('guest', 'scrypt$n=16384,r=8,p=1$m1t2mOpD2eg37GvTK91XEA==$nBGL4s13fvZUahaiYFjiZywmlFqXTv3JHxMEFo50nqY=');


--
-- Data for Name: vhosts; Type: TABLE DATA; Schema: batonmq_s_batonmq; Owner: -
--

INSERT INTO batonmq_s_batonmq.vhosts VALUES ('/');


--
-- Name: bindings bindings_pkey; Type: CONSTRAINT; Schema: batonmq_s_batonmq; Owner: -
--

ALTER TABLE ONLY batonmq_s_batonmq.bindings
    ADD CONSTRAINT bindings_pkey PRIMARY KEY (broker_id, vhost, source, destination_kind, destination, routing_key, arguments);


--
-- Name: brokers brokers_pkey; Type: CONSTRAINT; Schema: batonmq_s_batonmq; Owner: -
--

ALTER TABLE ONLY batonmq_s_batonmq.brokers
    ADD CONSTRAINT brokers_pkey PRIMARY KEY (broker_id);


--
-- Name: counters counters_pkey; Type: CONSTRAINT; Schema: batonmq_s_batonmq; Owner: -
--

ALTER TABLE ONLY batonmq_s_batonmq.counters
    ADD CONSTRAINT counters_pkey PRIMARY KEY (name);


--
-- Name: entries entries_pkey; Type: CONSTRAINT; Schema: batonmq_s_batonmq; Owner: -
--

ALTER TABLE ONLY batonmq_s_batonmq.entries
    ADD CONSTRAINT entries_pkey PRIMARY KEY (broker_id, vhost, queue, sequence);


--
-- Name: exchanges exchanges_pkey; Type: CONSTRAINT; Schema: batonmq_s_batonmq; Owner: -
--

ALTER TABLE ONLY batonmq_s_batonmq.exchanges
    ADD CONSTRAINT exchanges_pkey PRIMARY KEY (broker_id, vhost, name);


--
-- Name: messages messages_pkey; Type: CONSTRAINT; Schema: batonmq_s_batonmq; Owner: -
--

ALTER TABLE ONLY batonmq_s_batonmq.messages
    ADD CONSTRAINT messages_pkey PRIMARY KEY (id);


--
-- Name: meta meta_pkey; Type: CONSTRAINT; Schema: batonmq_s_batonmq; Owner: -
--

ALTER TABLE ONLY batonmq_s_batonmq.meta
    ADD CONSTRAINT meta_pkey PRIMARY KEY (key);


--
-- Name: queues queues_pkey; Type: CONSTRAINT; Schema: batonmq_s_batonmq; Owner: -
--

ALTER TABLE ONLY batonmq_s_batonmq.queues
    ADD CONSTRAINT queues_pkey PRIMARY KEY (broker_id, vhost, name);


--
-- Name: users users_pkey; Type: CONSTRAINT; Schema: batonmq_s_batonmq; Owner: -
--

ALTER TABLE ONLY batonmq_s_batonmq.users
    ADD CONSTRAINT users_pkey PRIMARY KEY (name);


--
-- Name: vhosts vhosts_pkey; Type: CONSTRAINT; Schema: batonmq_s_batonmq; Owner: -
--

ALTER TABLE ONLY batonmq_s_batonmq.vhosts
    ADD CONSTRAINT vhosts_pkey PRIMARY KEY (name);


--
-- Name: entries_message_id; Type: INDEX; Schema: batonmq_s_batonmq; Owner: -
--

CREATE INDEX entries_message_id ON batonmq_s_batonmq.entries USING btree (message_id);


--
-- Name: entries_priority; Type: INDEX; Schema: batonmq_s_batonmq; Owner: -
--

CREATE INDEX entries_priority ON batonmq_s_batonmq.entries USING btree (broker_id, vhost, queue, priority, sequence) WHERE (priority > 0);


--
-- PostgreSQL database dump complete
--

\unrestrict 32bSDXkNLQWMLzRt1QOvZNC7sc2Hm6X88AWL6fCTLZLlRQ6B6gTOFA3Ypmf8T5W

