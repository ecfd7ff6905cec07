CREATE TYPE "public"."d_mood" AS ENUM('sad', 'ok', 'happy');--> statement-breakpoint
CREATE TABLE "d_users" (
	"id" serial PRIMARY KEY NOT NULL,
	"name" text NOT NULL,
	"email" varchar(256),
	"mood" "d_mood" DEFAULT 'ok',
	"created_at" timestamp with time zone DEFAULT now() NOT NULL,
	"meta" jsonb,
	"score" numeric(10, 2),
	"active" boolean DEFAULT true,
	CONSTRAINT "d_users_email_unique" UNIQUE("email")
);
--> statement-breakpoint
CREATE TABLE "d_posts" (
	"id" serial PRIMARY KEY NOT NULL,
	"author_id" integer,
	"title" text NOT NULL,
	"ref" uuid DEFAULT gen_random_uuid()
);
--> statement-breakpoint
CREATE INDEX "d_users_name_idx" ON "d_users" USING btree ("name");
